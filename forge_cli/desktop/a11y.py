"""OSWorld's accessibility tree, pruned to what an agent can act on and capped to a token budget.

The desktop's in-VM server returns the screen's AT-SPI tree as XML (``GET /accessibility`` -> ``{"AT": xml}``):
one element per accessible, tagged with its role (spaces as ``-``: ``push-button``, ``menu-item``), with a
``name`` attribute, its text as element text, and namespaced attributes in upstream OSWorld's Ubuntu namespaces:
states (``st:showing``, ``st:visible``, ...) as ``"true"``, ``cp:screencoord="(x, y)"`` and ``cp:size="(w, h)"``
(only on showing, visible nodes) and ``val:value`` for value widgets.

Like OSWorld's own agents (``linearize_accessibility_tree``), forge turns it into a table with one line per
node, but with its own rule: a node is kept when it is showing and visible, has a position and a non-zero size,
and has a name or text or an interactive role (an unnamed empty text entry is still a target); upstream also
asks for an enabled/editable/expandable/checkable state and a role from its list. It keeps no class or
description column (upstream reads them from the Windows namespace, so on Ubuntu they are empty), and the
position is the top left corner: a click needs the centre, ``(x + w/2, y + h/2)``, which the table's first
line says.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass

NS_STATE = "https://accessibility.ubuntu.example.org/ns/state"
NS_COMPONENT = "https://accessibility.ubuntu.example.org/ns/component"
NS_VALUE = "https://accessibility.ubuntu.example.org/ns/value"

# AT-SPI roles (as the server writes them) an agent acts on even when they have no name or text
INTERACTIVE_ROLES: frozenset[str] = frozenset((
    "push-button", "toggle-button", "radio-button", "check-box", "combo-box", "entry", "password-text", "text",
    "spin-button", "slider", "scroll-bar", "link", "menu", "menu-item", "check-menu-item", "radio-menu-item",
    "page-tab", "list-item", "tree-item", "table-cell", "icon", "terminal",
))

PREAMBLE = "# one element per line; click an element at its centre: x + w/2, y + h/2"
HEADER = "tag\tname\ttext\tposition (x,y)\tsize (w,h)"
EMPTY = "(no visible elements)"
DEFAULT_MAX_TEXT = 60
_PAIR = re.compile(r"^\(\s*(-?\d+)\s*,\s*(-?\d+)\s*\)$")


@dataclass(frozen=True)
class A11yNode:
    """One kept node: its role tag, name, text (element text, else ``val:value``), top left corner and size."""

    tag: str
    name: str
    text: str
    x: int
    y: int
    w: int
    h: int

    @property
    def centre(self) -> tuple[int, int]:
        """Where a click on this node should land."""
        return self.x + self.w // 2, self.y + self.h // 2


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate: ``ceil(characters / 4)``, about right for English and markup in BPE
    tokenizers (and an overestimate for most of the table's short words and numbers)."""
    return math.ceil(len(text) / 4)


def _pair(value: str | None) -> tuple[int, int] | None:
    """``"(12, 34)"`` as numbers (parsed, never evaluated: the XML comes from the agent's machine)."""
    match = _PAIR.match(value.strip()) if value else None
    return (int(match[1]), int(match[2])) if match else None


def _state(node: ET.Element, state: str) -> bool:
    return node.get(f"{{{NS_STATE}}}{state}") == "true"


def _kept(node: ET.Element) -> A11yNode | None:
    if not (_state(node, "showing") and _state(node, "visible")):
        return None
    position = _pair(node.get(f"{{{NS_COMPONENT}}}screencoord"))
    size = _pair(node.get(f"{{{NS_COMPONENT}}}size"))
    if position is None or size is None or min(position) < 0 or min(size) <= 0:
        return None
    tag = node.tag.rsplit("}", 1)[-1]
    name = (node.get("name") or "").strip()
    text = (node.text or "").strip()
    if tag == "table-cell":
        # an empty cell (LibreOffice gives it the value 0.0) is noise: a visible sheet has a thousand of them, and
        # the filled cells' positions show where the others are
        if not text:
            return None
    else:
        text = text or (node.get(f"{{{NS_VALUE}}}value") or "").strip()
    if not (name or text or tag in INTERACTIVE_ROLES):
        return None
    return A11yNode(tag, name, text, *position, *size)


def parse_nodes(xml: str) -> list[A11yNode]:
    """The kept nodes of an accessibility-tree XML document, in document order. Raises ValueError on bad XML."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as exc:
        raise ValueError(f"the accessibility tree is not XML: {exc}") from None
    return [kept for node in root.iter() if (kept := _kept(node)) is not None]


def _cell(value: str, limit: int) -> str:
    """One table cell: whitespace (tabs, newlines) collapsed to single spaces, cut to ``limit`` characters."""
    value = " ".join(value.split())
    return value if len(value) <= limit else value[: limit - 1] + "…"


def node_line(node: A11yNode, max_text: int = DEFAULT_MAX_TEXT) -> str:
    """The node's table line: tag, name, text (both cut to ``max_text`` characters), x,y and w,h."""
    return "\t".join((node.tag, _cell(node.name, max_text), _cell(node.text, max_text),
                      f"{node.x},{node.y}", f"{node.w},{node.h}"))


def left_out_line(count: int, max_tokens: int) -> str:
    """The table's last line when it was cut."""
    return f"[{count} more element{'s' if count != 1 else ''} left out to stay within {max_tokens} tokens]"


def render_nodes(nodes: list[A11yNode], max_tokens: int, *, count_tokens: Callable[[str], int] = estimate_tokens,
                 max_text: int = DEFAULT_MAX_TEXT) -> str:
    """The table of ``nodes``, cut to the first nodes in document order so that ``count_tokens`` of the whole
    output is at most ``max_tokens``, then a line saying how many nodes were left out. The preamble, the header
    and that line are always there, even when they alone pass the budget."""
    if max_tokens < 1:
        raise ValueError("max_tokens must be at least 1")
    head = [PREAMBLE, HEADER]
    if not nodes:
        return "\n".join([*head, EMPTY])
    lines = [node_line(node, max_text) for node in nodes]

    def text(kept: int) -> str:
        tail = [left_out_line(len(lines) - kept, max_tokens)] if kept < len(lines) else []
        return "\n".join(head + lines[:kept] + tail)

    if count_tokens(text(len(lines))) <= max_tokens:
        return text(len(lines))
    low, high = 0, len(lines) - 1  # the most lines that fit, found with O(log n) calls of count_tokens
    while low < high:
        middle = (low + high + 1) // 2
        if count_tokens(text(middle)) <= max_tokens:
            low = middle
        else:
            high = middle - 1
    return text(low)


def render_tree(xml: str, max_tokens: int = 4000, *, count_tokens: Callable[[str], int] = estimate_tokens,
                max_text: int = DEFAULT_MAX_TEXT) -> str:
    """What ``computer_accessibility_tree`` returns: the pruned table of ``xml`` within ``max_tokens``
    (see :func:`render_nodes`; ``count_tokens`` may be a real tokenizer's counter)."""
    return render_nodes(parse_nodes(xml), max_tokens, count_tokens=count_tokens, max_text=max_text)
