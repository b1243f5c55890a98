"""The computer-use tools a desktop (OSWorld) task gives its harness, and the pyautogui code each action becomes.

Pure: nothing here touches the desktop. The desktop backend (``backend: {kind: desktop}``) runs
:func:`to_pyautogui`'s code through the container's in-VM server (``POST /execute``, as OSWorld's
``PythonController.execute_python_command`` does: ``import pyautogui; ...; <code>``) and logs :func:`record`.

Code is built from validated arguments only: every argument is checked against the tool's JSON schema, numbers
are emitted as ``int`` and strings with ``repr``, so the code is always a sequence of ``pyautogui.<fn>(...)``
calls with constant arguments, whatever text the agent sends.

The ``<`` character: pyautogui on X11 types ``>`` for ``<`` (it holds shift over the key that X maps ``less``
to; pyautogui issue 198, OSWorld issue 257), which is why OSWorld's host rewrites ``typewrite``/``press`` code
before running it (``_fix_pyautogui_less_than_bug``). forge's desktop is the same X server and pyautogui, so
:func:`to_pyautogui` does the equivalent when it builds the code: it types ``<`` as ``hotkey('shift', ',')``
(a US layout) between ``typewrite`` runs. :func:`record` keeps the unsplit call, as OSWorld's action history
does (it records the agent's action before rewriting it), so a recorded trajectory replays through OSWorld.
"""

from __future__ import annotations

import math
from typing import Any

import jsonschema

from forge_cli.tools.spec import SessionBackendSpec, ToolSpec

MAX_COORD = 9999

# Key names: a hand-written list of pyautogui's common names (not a copy of pyautogui's KEYBOARD_KEYS), plus
# f1..f24 and any single printable ASCII character. Names are matched case-insensitively, as pyautogui does.
NAMED_KEYS: frozenset[str] = frozenset((
    "enter", "return", "tab", "space", "backspace", "delete", "del", "esc", "escape", "insert",
    "up", "down", "left", "right", "home", "end", "pageup", "pagedown", "pgup", "pgdn",
    "shift", "shiftleft", "shiftright", "ctrl", "ctrlleft", "ctrlright", "alt", "altleft", "altright",
    "win", "winleft", "winright", "command", "option", "capslock", "numlock", "scrolllock",
    "printscreen", "prtsc", "pause", "apps", "volumeup", "volumedown", "volumemute",
    "playpause", "nexttrack", "prevtrack", "add", "subtract", "multiply", "divide", "decimal",
    *(f"num{i}" for i in range(10)), *(f"f{i}" for i in range(1, 25)),
))
# names other tools use (xdotool, Playwright) for keys pyautogui names differently
KEY_ALIASES: dict[str, str] = {"control": "ctrl", "cmd": "command", "super": "win", "meta": "win",
                               "arrowup": "up", "arrowdown": "down", "arrowleft": "left", "arrowright": "right"}
PRINTABLE_KEYS: frozenset[str] = frozenset(chr(c) for c in range(0x20, 0x7F))

OBSERVATION_RECORDS: dict[str, str] = {"computer_screenshot": "# screenshot",
                                       "computer_accessibility_tree": "# accessibility_tree"}
CONTROL_RECORDS: dict[str, str] = {"computer_wait": "WAIT", "computer_done": "DONE", "computer_fail": "FAIL"}

_LESS_THAN = "pyautogui.hotkey('shift', ',')"
_DRAG_DURATION = 1.0  # seconds; OSWorld's computer_13 DRAG_TO uses the same, slow enough for apps to see a drag


class DesktopActionError(ValueError):
    """Arguments a desktop tool cannot turn into code; the message is meant for the agent (a tool error)."""


def _coord(description: str) -> dict[str, Any]:
    return {"type": "integer", "minimum": 0, "maximum": MAX_COORD, "description": description}


_BUTTON = {"type": "string", "enum": ["left", "right", "middle"], "default": "left"}
_KEYS_TEXT = ("Key names as pyautogui knows them: enter, tab, space, backspace, delete, esc, up, down, left, right, "
              "home, end, pageup, pagedown, insert, shift, ctrl, alt, win, capslock, printscreen, f1 to f24, "
              "or one character such as a, 5 or /.")
_SCREEN = "Coordinates are pixels of the screenshot, x to the right and y down from the top left corner (0, 0)."


def _keys(min_items: int, max_items: int) -> dict[str, Any]:
    return {"type": "array", "minItems": min_items, "maxItems": max_items,
            "items": {"type": "string", "minLength": 1, "maxLength": 24}}


def _tool(name: str, description: str, properties: dict[str, Any], required: tuple[str, ...] = (),
          **extra: Any) -> ToolSpec:
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False, **extra}
    if required:
        schema["required"] = list(required)
    return ToolSpec(name=name, description=description, input_schema=schema, backend=SessionBackendSpec(kind="desktop"))


DESKTOP_TOOLS: tuple[ToolSpec, ...] = (
    _tool("computer_screenshot", "Take a screenshot of the whole screen (an image). " + _SCREEN +
          " Take one first, and again after each action that changes the screen.", {}),
    _tool("computer_accessibility_tree", "The screen's accessibility tree as text: one line per visible element "
          "with its tag (role), name, text, position x,y of its top left corner and size w,h in screenshot pixels. "
          "To click an element, click its centre (x + w/2, y + h/2). A long tree is cut short; its last line says "
          "how many elements were left out.", {}),
    _tool("computer_click", "Click at a point of the screen. " + _SCREEN + " button: left (default), right "
          "(context menu) or middle; clicks: 1 (default), 2 (double click) or 3 (triple click, selects a line).",
          {"x": _coord("pixels from the left edge"), "y": _coord("pixels from the top edge"), "button": _BUTTON,
           "clicks": {"type": "integer", "minimum": 1, "maximum": 3, "default": 1}}, ("x", "y")),
    _tool("computer_double_click", "Double-click at a point, e.g. to open a file or select a word. " + _SCREEN,
          {"x": _coord("pixels from the left edge"), "y": _coord("pixels from the top edge")}, ("x", "y")),
    _tool("computer_move", "Move the mouse pointer to a point without clicking, e.g. to open a hover menu. "
          + _SCREEN, {"x": _coord("pixels from the left edge"), "y": _coord("pixels from the top edge")}, ("x", "y")),
    _tool("computer_drag", "Press a mouse button at (x1, y1), move to (x2, y2) and release it: move a window or a "
          "file, select text, resize. " + _SCREEN,
          {"x1": _coord("start, from the left edge"), "y1": _coord("start, from the top edge"),
           "x2": _coord("end, from the left edge"), "y2": _coord("end, from the top edge"), "button": _BUTTON},
          ("x1", "y1", "x2", "y2")),
    _tool("computer_scroll", "Turn the mouse wheel, over the point (x, y) if given (the pointer moves there first), "
          "else where the pointer is. dy: wheel clicks, positive scrolls up and negative down; dx: positive "
          "scrolls right and negative left. One click moves about three lines. " + _SCREEN,
          {"dy": {"type": "integer", "minimum": -100, "maximum": 100},
           "dx": {"type": "integer", "minimum": -100, "maximum": 100},
           "x": _coord("pixels from the left edge"), "y": _coord("pixels from the top edge")},
          ("dy",), dependentRequired={"x": ["y"], "y": ["x"]}),
    _tool("computer_type", "Type text with the keyboard into the focused element (click it first), as on a US "
          "keyboard: a newline presses Enter, a tab Tab. Characters that are not on a US keyboard (é, ü, emoji) "
          "are not typed.", {"text": {"type": "string", "minLength": 1, "maxLength": 5000}}, ("text",)),
    _tool("computer_key", "Press keys one after another, each pressed and released, e.g. [\"enter\"] or "
          "[\"down\", \"down\", \"enter\"]. " + _KEYS_TEXT, {"keys": _keys(1, 32)}, ("keys",)),
    _tool("computer_hotkey", "Press keys together as a shortcut, then release them in reverse order, e.g. "
          "[\"ctrl\", \"s\"] to save, [\"ctrl\", \"shift\", \"t\"] or [\"alt\", \"f4\"]; letters count as "
          "keys (name shift to add it). " + _KEYS_TEXT,
          {"keys": _keys(1, 5)}, ("keys",)),
    _tool("computer_wait", "Wait some seconds (default 2) for the screen to change, e.g. while an application "
          "starts or a file loads.", {"seconds": {"type": "number", "minimum": 0, "maximum": 30, "default": 2}}),
    _tool("computer_done", "Declare the task finished: call it once the task is complete. The episode ends and "
          "the computer's final state is checked.", {}),
    _tool("computer_fail", "Declare the task infeasible: it cannot be done on this computer (e.g. the feature it "
          "asks for does not exist). The episode ends. OSWorld scores a FAIL as a success only on tasks that are "
          "really infeasible, and as a failure on every other task: give up this way only when the task cannot "
          "be done.", {}),
)
_SCHEMAS: dict[str, dict[str, Any]] = {t.name: t.input_schema for t in DESKTOP_TOOLS}


def valid_key_names() -> str:
    """The key names an agent may use, for error messages."""
    numbered = {f"num{i}" for i in range(10)} | {f"f{i}" for i in range(1, 25)}
    return ", ".join(sorted(NAMED_KEYS - numbered)) + ", num0..num9, f1..f24, or one printable character"


def normalize_key(key: str) -> str:
    """The pyautogui name of ``key``: a single printable character as it is, a name lower-cased (aliases mapped)."""
    if len(key) == 1 and key in PRINTABLE_KEYS:
        return key
    name = KEY_ALIASES.get(key.lower(), key.lower())
    if name not in NAMED_KEYS:
        raise DesktopActionError(f"unknown key {key!r}: use {valid_key_names()}")
    return name


def _lit(value: Any) -> str:
    """A Python literal for a validated argument: an int, a finite float, a str or a list of str (else a bug)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str | list):
        raise TypeError(f"not a literal argument: {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise TypeError(f"not a finite number: {value!r}")
    if isinstance(value, list):
        if not all(isinstance(v, str) for v in value):
            raise TypeError(f"not a list of strings: {value!r}")
        return "[" + ", ".join(repr(v) for v in value) + "]"
    return repr(value)


def _call(function: str, *args: Any, **kwargs: Any) -> str:
    parts = [_lit(a) for a in args] + [f"{k}={_lit(v)}" for k, v in kwargs.items()]
    return f"pyautogui.{function}({', '.join(parts)})"


def _validate(name: str, arguments: Any) -> dict[str, Any]:
    schema = _SCHEMAS.get(name)
    if schema is None:
        raise DesktopActionError(f"{name!r} is not a desktop tool")
    if not isinstance(arguments, dict):
        raise DesktopActionError(f"{name}: arguments must be a JSON object")
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(arguments), key=lambda e: list(e.path))
    if errors:
        raise DesktopActionError(f"invalid arguments for {name}: {'; '.join(e.message for e in errors[:5])}")
    return arguments


def _type(text: str, fix_less_than: bool) -> list[str]:
    if not fix_less_than:
        return [_call("typewrite", text)]
    calls: list[str] = []
    for i, run in enumerate(text.split("<")):
        if i:
            calls.append(_LESS_THAN)
        if run:
            calls.append(_call("typewrite", run))
    return calls


def _press(keys: list[str], fix_less_than: bool) -> list[str]:
    def press(run: list[str]) -> str:
        return _call("press", run[0] if len(run) == 1 else run)

    if not fix_less_than:
        return [press(keys)]
    calls: list[str] = []
    run: list[str] = []
    for key in keys:
        if key != "<":
            run.append(key)
            continue
        if run:
            calls.append(press(run))
        run = []
        calls.append(_LESS_THAN)
    return [*calls, press(run)] if run else calls


def _code(name: str, a: dict[str, Any], fix_less_than: bool) -> str | None:
    if name in OBSERVATION_RECORDS or name in CONTROL_RECORDS:
        return None
    def n(key: str, default: int = 0) -> int:  # JSON Schema's integer admits 3.0: emit it as 3
        return int(a.get(key, default))

    if name == "computer_click":
        options: dict[str, Any] = {"clicks": n("clicks", 1)} if n("clicks", 1) != 1 else {}
        if a.get("button", "left") != "left":
            options["button"] = a["button"]
        calls = [_call("click", n("x"), n("y"), **options)]
    elif name == "computer_double_click":
        calls = [_call("doubleClick", n("x"), n("y"))]
    elif name == "computer_move":
        calls = [_call("moveTo", n("x"), n("y"))]
    elif name == "computer_drag":
        calls = [_call("moveTo", n("x1"), n("y1")),
                 _call("dragTo", n("x2"), n("y2"), duration=_DRAG_DURATION, button=a.get("button", "left"))]
    elif name == "computer_scroll":
        at = {"x": n("x"), "y": n("y")} if "x" in a else {}
        calls = [_call("scroll", n("dy"), **at)] if n("dy") or not n("dx") else []
        calls += [_call("hscroll", n("dx"), **at)] if n("dx") else []
    elif name == "computer_type":
        calls = _type(a["text"], fix_less_than)
    elif name == "computer_key":
        calls = _press([normalize_key(k) for k in a["keys"]], fix_less_than)
    elif name == "computer_hotkey":
        # a shortcut's letter is a key, not a character: pyautogui would add shift for an upper-case one
        calls = [_call("hotkey", *(normalize_key(k).lower() for k in a["keys"]))]
    else:  # a tool in DESKTOP_TOOLS without code: a bug the conformance test catches
        raise DesktopActionError(f"{name!r} has no pyautogui code")
    return "; ".join(calls)


def to_pyautogui(name: str, arguments: Any) -> str | None:
    """The pyautogui code to run for one call of a desktop tool (``'<'`` typed the X11-safe way), or ``None`` for
    the tools that are not pyautogui (screenshot, accessibility tree, wait, done, fail).

    Raises DesktopActionError (a tool error for the agent) when the arguments break the tool's schema or name a
    key pyautogui does not know."""
    return _code(name, _validate(name, arguments), fix_less_than=True)


def record(name: str, arguments: Any) -> str:
    """What the action log records for one call, in OSWorld's trajectory vocabulary: the pyautogui code an
    OSWorld ``pyautogui`` agent would have sent (``'<'`` left as it is, as OSWorld's action history keeps it),
    ``WAIT``, ``DONE`` or ``FAIL`` for those tools, and a Python comment for the observations (``# screenshot``,
    ``# accessibility_tree``): they change nothing, and a comment is a no-op if a replay runs it.

    Raises DesktopActionError like :func:`to_pyautogui`."""
    code = _code(name, _validate(name, arguments), fix_less_than=False)
    if code is not None:
        return code
    return OBSERVATION_RECORDS.get(name) or CONTROL_RECORDS[name]
