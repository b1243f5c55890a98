"""The browser tools a web task gives its harness: a subset of ``@playwright/mcp``'s, forwarded by forge's tool
server to the rollout's own ``@playwright/mcp`` process (``backend: {kind: browser}``).

Left out on purpose: tools that run the agent's JavaScript in the page (``browser_evaluate``,
``browser_run_code_unsafe``: a MiniWoB++ page's reward is a JavaScript variable), that read the machine's files
(``browser_file_upload``) or forge's own network traffic, and tab or browser management that would lose the task's
page. Every tool here must exist in the pinned server; a rollout whose server lacks one fails at start (infra).
"""

from __future__ import annotations

from typing import Any

from forge_cli.tools.spec import SessionBackendSpec, ToolSpec

_TARGET = {"type": "string", "description": "the element's ref from the last browser_snapshot (e.g. e12)"}
_ELEMENT = {"type": "string", "description": "what the element is, in a few words"}


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> ToolSpec:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return ToolSpec(name=name, description=description, input_schema=schema, backend=SessionBackendSpec(kind="browser"))


BROWSER_TOOLS: tuple[ToolSpec, ...] = (
    _tool("browser_snapshot", "Show the page as an accessibility tree: its text and every element with a ref to "
          "use in the other browser tools. Take one first, and again after the page changes.", {}, []),
    _tool("browser_click", "Click an element of the page.",
          {"target": _TARGET, "element": _ELEMENT, "doubleClick": {"type": "boolean"}}, ["target"]),
    _tool("browser_type", "Type text into an editable element (submit: press Enter after it).",
          {"target": _TARGET, "element": _ELEMENT, "text": {"type": "string"}, "submit": {"type": "boolean"}},
          ["target", "text"]),
    _tool("browser_press_key", "Press a key, e.g. Enter, Tab, ArrowDown, a.", {"key": {"type": "string"}}, ["key"]),
    _tool("browser_select_option", "Choose options in a drop-down list.",
          {"target": _TARGET, "element": _ELEMENT, "values": {"type": "array", "items": {"type": "string"}}},
          ["target", "values"]),
    _tool("browser_hover", "Move the mouse over an element.", {"target": _TARGET, "element": _ELEMENT}, ["target"]),
    _tool("browser_drag", "Drag one element onto another.",
          {"startTarget": _TARGET, "startElement": _ELEMENT, "endTarget": _TARGET, "endElement": _ELEMENT},
          ["startTarget", "endTarget"]),
    _tool("browser_mouse_click_xy", "Click at a position of the page (CSS pixels from its top left corner).",
          {"x": {"type": "number"}, "y": {"type": "number"}}, ["x", "y"]),
    _tool("browser_take_screenshot", "Take a screenshot of the page (an image, for models that see).",
          {"fullPage": {"type": "boolean"}}, []),
    _tool("browser_wait_for", "Wait for some seconds, or until a text appears or disappears.",
          {"time": {"type": "number"}, "text": {"type": "string"}, "textGone": {"type": "string"}}, []),
    _tool("browser_navigate", "Open a URL in the current tab.", {"url": {"type": "string"}}, ["url"]),
    _tool("browser_navigate_back", "Go back to the previous page.", {}, []),
)

# arguments the server needs that the agent need not give
DEFAULT_ARGUMENTS: dict[str, dict[str, Any]] = {"browser_take_screenshot": {"scale": "css", "type": "png"}}
