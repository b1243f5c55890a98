"""The computer-use tools: their schemas, the pyautogui code each call becomes and what the action log records.

Expected code is written out by hand, in OSWorld's ``pyautogui`` action-space conventions."""

from __future__ import annotations

import ast
import importlib.util
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from forge_cli.desktop.actions import (
    DESKTOP_TOOLS,
    NAMED_KEYS,
    DesktopActionError,
    normalize_key,
    record,
    to_pyautogui,
)
from forge_cli.errors import UserError
from forge_cli.tools.spec import SessionBackendSpec, parse_tools
from tests.requires import requires

TOOLS = {t.name: t for t in DESKTOP_TOOLS}
# the smallest valid arguments of every tool
MINIMAL: dict[str, dict[str, Any]] = {
    "computer_screenshot": {}, "computer_accessibility_tree": {}, "computer_click": {"x": 1, "y": 2},
    "computer_double_click": {"x": 1, "y": 2}, "computer_move": {"x": 1, "y": 2},
    "computer_drag": {"x1": 1, "y1": 2, "x2": 3, "y2": 4}, "computer_scroll": {"dy": -1},
    "computer_type": {"text": "a"}, "computer_key": {"keys": ["enter"]}, "computer_hotkey": {"keys": ["ctrl", "s"]},
    "computer_wait": {}, "computer_done": {}, "computer_fail": {},
}

# (tool, arguments, code to run, what OSWorld records)
CASES: list[tuple[str, dict[str, Any], str | None, str]] = [
    ("computer_screenshot", {}, None, "# screenshot"),
    ("computer_accessibility_tree", {}, None, "# accessibility_tree"),
    ("computer_click", {"x": 100, "y": 200}, "pyautogui.click(100, 200)", "pyautogui.click(100, 200)"),
    ("computer_click", {"x": 0, "y": 9999, "button": "left", "clicks": 1}, "pyautogui.click(0, 9999)",
     "pyautogui.click(0, 9999)"),
    ("computer_click", {"x": 5, "y": 6, "button": "right"}, "pyautogui.click(5, 6, button='right')",
     "pyautogui.click(5, 6, button='right')"),
    ("computer_click", {"x": 5, "y": 6, "clicks": 3, "button": "middle"},
     "pyautogui.click(5, 6, clicks=3, button='middle')", "pyautogui.click(5, 6, clicks=3, button='middle')"),
    ("computer_click", {"x": 7.0, "y": 8}, "pyautogui.click(7, 8)", "pyautogui.click(7, 8)"),
    ("computer_double_click", {"x": 10, "y": 20}, "pyautogui.doubleClick(10, 20)", "pyautogui.doubleClick(10, 20)"),
    ("computer_move", {"x": 30, "y": 40}, "pyautogui.moveTo(30, 40)", "pyautogui.moveTo(30, 40)"),
    ("computer_drag", {"x1": 1, "y1": 2, "x2": 300, "y2": 400},
     "pyautogui.moveTo(1, 2); pyautogui.dragTo(300, 400, duration=1.0, button='left')",
     "pyautogui.moveTo(1, 2); pyautogui.dragTo(300, 400, duration=1.0, button='left')"),
    ("computer_drag", {"x1": 1, "y1": 2, "x2": 3, "y2": 4, "button": "right"},
     "pyautogui.moveTo(1, 2); pyautogui.dragTo(3, 4, duration=1.0, button='right')",
     "pyautogui.moveTo(1, 2); pyautogui.dragTo(3, 4, duration=1.0, button='right')"),
    ("computer_scroll", {"dy": -5}, "pyautogui.scroll(-5)", "pyautogui.scroll(-5)"),
    ("computer_scroll", {"dy": 3, "x": 50, "y": 60}, "pyautogui.scroll(3, x=50, y=60)",
     "pyautogui.scroll(3, x=50, y=60)"),
    ("computer_scroll", {"dy": 0, "dx": 4}, "pyautogui.hscroll(4)", "pyautogui.hscroll(4)"),
    ("computer_scroll", {"dy": 0}, "pyautogui.scroll(0)", "pyautogui.scroll(0)"),
    ("computer_scroll", {"dy": 2, "dx": -1, "x": 5, "y": 6},
     "pyautogui.scroll(2, x=5, y=6); pyautogui.hscroll(-1, x=5, y=6)",
     "pyautogui.scroll(2, x=5, y=6); pyautogui.hscroll(-1, x=5, y=6)"),
    ("computer_type", {"text": "hello world"}, "pyautogui.typewrite('hello world')",
     "pyautogui.typewrite('hello world')"),
    ("computer_type", {"text": "it's \"ok\"\n"}, "pyautogui.typewrite('it\\'s \"ok\"\\n')",
     "pyautogui.typewrite('it\\'s \"ok\"\\n')"),
    ("computer_type", {"text": "a<b"},
     "pyautogui.typewrite('a'); pyautogui.hotkey('shift', ','); pyautogui.typewrite('b')",
     "pyautogui.typewrite('a<b')"),
    ("computer_type", {"text": "<<"}, "pyautogui.hotkey('shift', ','); pyautogui.hotkey('shift', ',')",
     "pyautogui.typewrite('<<')"),
    ("computer_key", {"keys": ["Enter"]}, "pyautogui.press('enter')", "pyautogui.press('enter')"),
    ("computer_key", {"keys": ["down", "down", "A"]}, "pyautogui.press(['down', 'down', 'A'])",
     "pyautogui.press(['down', 'down', 'A'])"),
    ("computer_key", {"keys": ["<"]}, "pyautogui.hotkey('shift', ',')", "pyautogui.press('<')"),
    ("computer_key", {"keys": ["a", "<", "ArrowDown", "F5"]},
     "pyautogui.press('a'); pyautogui.hotkey('shift', ','); pyautogui.press(['down', 'f5'])",
     "pyautogui.press(['a', '<', 'down', 'f5'])"),
    ("computer_hotkey", {"keys": ["ctrl", "s"]}, "pyautogui.hotkey('ctrl', 's')", "pyautogui.hotkey('ctrl', 's')"),
    ("computer_hotkey", {"keys": ["Control", "Shift", "T"]}, "pyautogui.hotkey('ctrl', 'shift', 't')",
     "pyautogui.hotkey('ctrl', 'shift', 't')"),
    ("computer_hotkey", {"keys": ["alt", "F4"]}, "pyautogui.hotkey('alt', 'f4')", "pyautogui.hotkey('alt', 'f4')"),
    ("computer_wait", {}, None, "WAIT"),
    ("computer_wait", {"seconds": 0.5}, None, "WAIT"),
    ("computer_done", {}, None, "DONE"),
    ("computer_fail", {}, None, "FAIL"),
]


@pytest.mark.parametrize(("name", "arguments", "code", "recorded"), CASES)
def test_each_tool_code_and_record(name: str, arguments: dict[str, Any], code: str | None, recorded: str) -> None:
    assert to_pyautogui(name, arguments) == code
    assert record(name, arguments) == recorded


class _Recorder:
    """A stand-in pyautogui: every call is recorded, nothing else is reachable."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, function: str) -> Any:
        return lambda *args, **kwargs: self.calls.append((function, args, kwargs))


def _constant_calls(code: str) -> list[tuple[str, list[Any]]]:
    """The code's statements, each asserted to be ``pyautogui.<fn>(<constants>)``: (fn, positional values)."""
    calls = []
    for statement in ast.parse(code).body:
        assert isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call), code
        call = statement.value
        assert isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name), code
        assert call.func.value.id == "pyautogui", code
        values = [*call.args, *(k.value for k in call.keywords)]
        assert all(isinstance(ast.literal_eval(v), str | int | float | list) for v in values), code
        calls.append((call.func.attr, [ast.literal_eval(a) for a in call.args]))
    return calls


def _typed(code: str) -> str:
    """What the code types, run against a recorder: typewrite runs and shift+comma as '<'."""
    fake = _Recorder()
    exec(code, {"__builtins__": {}, "pyautogui": fake})
    out = []
    for function, args, _ in fake.calls:
        assert function in ("typewrite", "hotkey"), function
        out.append(args[0] if function == "typewrite" else "<")
        assert function == "typewrite" or args == ("shift", ",")
    return "".join(out)


INJECTIONS = [
    "'); import os; os.system('x",
    "\"); import os; os.system(\"x",
    "a\\'b\\\\c\\",
    "line one\nline two\r\n\ttabbed",
    "unicode: é ü 中文 😀 \u202e \ud800",
    "'''\"\"\" {0} %s ${HOME} `id` $(id)",
    "\x00\x1b[31m",
]


@pytest.mark.parametrize("text", INJECTIONS)
def test_typed_text_cannot_inject_code(text: str) -> None:
    for code in (to_pyautogui("computer_type", {"text": text}), record("computer_type", {"text": text})):
        assert code is not None
        assert _constant_calls(code) == [("typewrite", [text])]
        assert _typed(code) == text


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_any_text_is_typed_literally(text: str) -> None:
    code = to_pyautogui("computer_type", {"text": text})
    assert code is not None
    _constant_calls(code)
    assert _typed(code) == text
    assert _constant_calls(record("computer_type", {"text": text})) == [("typewrite", [text])]


def test_less_than_is_typed_with_shift_comma() -> None:
    code = to_pyautogui("computer_type", {"text": "if a < b: x = '<tag>'"})
    assert code is not None
    assert "'<'" not in code and "<" not in "".join(str(a) for _, args in _constant_calls(code) for a in args)
    assert _typed(code) == "if a < b: x = '<tag>'"


@pytest.mark.parametrize(("arguments", "problem"), [
    ({"x": "1); import os; os.system('x')", "y": 1}, "is not of type 'integer'"),
    ({"x": True, "y": 1}, "is not of type 'integer'"),
    ({"x": 1.5, "y": 1}, "is not of type 'integer'"),
    ({"x": 10000, "y": 1}, "10000 is greater than the maximum of 9999"),
    ({"x": 1, "y": 1, "clicks": 4}, "4 is greater than the maximum of 3"),
    ({"x": 1, "y": 1, "button": "left'); x('"}, "is not one of ['left', 'right', 'middle']"),
    ({"x": 1, "y": 1, "code": "x"}, "Additional properties are not allowed ('code' was unexpected)"),
])
def test_bad_arguments_are_tool_errors(arguments: dict[str, Any], problem: str) -> None:
    for function in (to_pyautogui, record):
        with pytest.raises(DesktopActionError, match="invalid arguments for computer_click") as caught:
            function("computer_click", arguments)
        assert problem in str(caught.value)


def test_unknown_tool_and_non_object_arguments() -> None:
    with pytest.raises(DesktopActionError, match="'browser_click' is not a desktop tool"):
        to_pyautogui("browser_click", {})
    with pytest.raises(DesktopActionError, match="arguments must be a JSON object"):
        record("computer_click", [1, 2])


@pytest.mark.parametrize("key", ["foo", "space bar", "é", "\n", "ctrl+s", "f25", "num10"])
def test_unknown_keys_list_the_valid_names(key: str) -> None:
    for name in ("computer_key", "computer_hotkey"):
        with pytest.raises(DesktopActionError) as caught:
            to_pyautogui(name, {"keys": ["shift", key]})
        message = str(caught.value)
        assert message.startswith(f"unknown key {key!r}: use ")
        for valid in ("enter", "tab", "space", "backspace", "esc", "pagedown", "ctrl", "alt", "win", "f1..f24",
                      "num0..num9", "one printable character"):
            assert valid in message


def test_key_names() -> None:
    assert [normalize_key(k) for k in ("Enter", "PGDN", "control", "Cmd", "super", "ArrowLeft", "A", "/", " ")] == \
        ["enter", "pgdn", "ctrl", "command", "win", "left", "A", "/", " "]
    assert {"f1", "f24", "num0", "num9", "space", "printscreen"} <= NAMED_KEYS


def test_key_names_are_pyautogui_names() -> None:
    """Cross-check the hand-written list against the installed pyautogui's KEY_NAMES, read without importing
    it (its import needs a display); needs the part desktop-host (pyautogui in .venv)."""
    requires("desktop-host")
    spec = importlib.util.find_spec("pyautogui")
    assert spec is not None and spec.origin is not None
    with open(spec.origin, encoding="utf-8") as source:
        tree = ast.parse(source.read())
    keyboard_keys = next(ast.literal_eval(node.value) for node in ast.walk(tree) if isinstance(node, ast.Assign)
                         and any(isinstance(t, ast.Name) and t.id == "KEY_NAMES" for t in node.targets))
    assert set(NAMED_KEYS) <= set(keyboard_keys)
    assert {chr(c) for c in range(0x20, 0x7F) if not chr(c).isupper()} <= set(keyboard_keys)


@pytest.mark.parametrize(("name", "valid", "invalid"), [
    ("computer_click", [{"x": 0, "y": 0}, {"x": 9999, "y": 9999, "button": "middle", "clicks": 3}],
     [{"x": -1, "y": 0}, {"x": 0, "y": 10000}, {"x": 0, "y": 0, "clicks": 0}, {"x": 0, "y": 0, "clicks": 4},
      {"x": 0}, {"x": 0, "y": 0, "button": "side"}, {"x": 0, "y": 0, "extra": 1}, {"x": 0.5, "y": 0}]),
    ("computer_drag", [{"x1": 0, "y1": 0, "x2": 9999, "y2": 9999}],
     [{"x1": 0, "y1": 0, "x2": 0}, {"x1": 0, "y1": 0, "x2": 0, "y2": 10000}]),
    ("computer_scroll", [{"dy": 100}, {"dy": -100, "dx": 100, "x": 0, "y": 0}],
     [{}, {"dy": 101}, {"dy": 0, "dx": -101}, {"dy": 1, "x": 5}, {"dy": 1, "y": 5}, {"dy": 1.5}]),
    ("computer_type", [{"text": "x" * 5000}], [{"text": ""}, {"text": "x" * 5001}, {"text": 5}, {}]),
    ("computer_key", [{"keys": ["a"] * 32}], [{"keys": []}, {"keys": ["a"] * 33}, {"keys": [""]}, {"keys": "a"}]),
    ("computer_hotkey", [{"keys": ["ctrl", "alt", "shift", "win", "t"]}],
     [{"keys": []}, {"keys": ["ctrl"] * 6}, {"keys": [1]}]),
    ("computer_wait", [{}, {"seconds": 0}, {"seconds": 30}, {"seconds": 2.5}],
     [{"seconds": -0.1}, {"seconds": 30.5}, {"seconds": "2"}]),
    ("computer_done", [{}], [{"reason": "x"}]),
    ("computer_screenshot", [{}], [{"region": [0, 0, 1, 1]}]),
])
def test_schema_bounds(name: str, valid: list[dict[str, Any]], invalid: list[dict[str, Any]]) -> None:
    validator = Draft202012Validator(TOOLS[name].input_schema)
    for arguments in valid:
        assert validator.is_valid(arguments), arguments
    for arguments in invalid:
        assert not validator.is_valid(arguments), arguments


def test_every_tool_conforms() -> None:
    assert set(TOOLS) == set(MINIMAL)
    assert len(DESKTOP_TOOLS) == len(TOOLS) == 13
    for tool in DESKTOP_TOOLS:
        Draft202012Validator.check_schema(tool.input_schema)
        assert tool.input_schema["additionalProperties"] is False
        assert tool.backend == SessionBackendSpec(kind="desktop")
        assert len(tool.description) > 40
        code = to_pyautogui(tool.name, MINIMAL[tool.name])
        recorded = record(tool.name, MINIMAL[tool.name])
        if code is None:
            assert recorded in ("# screenshot", "# accessibility_tree", "WAIT", "DONE", "FAIL")
        else:
            assert _constant_calls(code) and _constant_calls(recorded)
        for prop in tool.input_schema["properties"].values():
            if prop.get("type") in ("integer", "number"):
                assert "minimum" in prop and "maximum" in prop, tool.name


def test_descriptions_tell_the_model_the_rules() -> None:
    assert "top left corner (0, 0)" in TOOLS["computer_click"].description
    assert "x + w/2, y + h/2" in TOOLS["computer_accessibility_tree"].description
    assert "infeasible" in TOOLS["computer_fail"].description
    for name in ("computer_key", "computer_hotkey"):
        assert "enter, tab, space" in TOOLS[name].description and "f1 to f24" in TOOLS[name].description


def test_a_task_file_may_name_the_desktop_backend() -> None:
    entry = TOOLS["computer_click"].model_dump()
    assert parse_tools([entry], "task.yaml") == (TOOLS["computer_click"],)
    with pytest.raises(UserError) as caught:
        parse_tools([{**entry, "backend": {"kind": "vm"}}], "task.yaml")
    assert "{kind: desktop}" in (caught.value.fix or "")
