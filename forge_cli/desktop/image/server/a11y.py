"""The at-spi accessibility tree as XML in the layout OSWorld's host side parses (forge's own implementation).

Layout (what OSWorld's getters, metrics and agents' linearizers read):

* the root element is `desktop-frame`; each element's tag is its at-spi role name with spaces turned into dashes
  (`push-button`, `table-cell`, `document-web`; `unknown` when the role has no name); its children are its at-spi
  children, the desktop's children being the applications;
* attribute `name` is the accessible name; the element's text is the Text interface's content, if any;
* states are attributes `{STATE}showing="true"`, `{STATE}visible="true"`, ... (one per state that is set, named
  after the state with underscores: `multi_line`);
* object attributes are `{ATTRIBUTES}<key>`; the description, when set, is `{ATTRIBUTES}description`;
* for showing and visible components, `{COMPONENT}screencoord="(x, y)"` and `{COMPONENT}size="(w, h)"`;
* Value: `{VALUE}value`, `{VALUE}min`, `{VALUE}max`, `{VALUE}step`; Action: `{ACTION}<name>_desc` and
  `{ACTION}<name>_kb`; Document: `{DOCUMENT}locale` and `{DOCUMENT_ATTRIBUTES}<key>`; `image="true"` and
  `selection="true"` for objects with those interfaces.

The namespace URIs are OSWorld's Ubuntu ones. The walk is bounded: MAX_DEPTH levels, MAX_WIDTH children per node,
MAX_NODES nodes in all and a time budget, so a hung application cannot stall a request; what was not reached is
simply left out. A table with more than MAX_WIDTH children (a LibreOffice sheet) lists its on-screen cells. The
bindings (gi's Atspi, from python3-gi + gir1.2-atspi-2.0, as used by python3-pyatspi) are imported on first use:
without them, the route answers 500 with a one-line reason.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
import xml.etree.ElementTree as ET
from typing import Any

_BASE = "https://accessibility.ubuntu.example.org/ns"
NAMESPACES = {
    "st": f"{_BASE}/state",
    "attr": f"{_BASE}/attributes",
    "cp": f"{_BASE}/component",
    "doc": f"{_BASE}/document",
    "docattr": f"{_BASE}/document/attributes",
    "txt": f"{_BASE}/text",
    "val": f"{_BASE}/value",
    "act": f"{_BASE}/action",
}
STATE, ATTRIBUTES, COMPONENT = NAMESPACES["st"], NAMESPACES["attr"], NAMESPACES["cp"]
DOCUMENT, DOCUMENT_ATTRIBUTES = NAMESPACES["doc"], NAMESPACES["docattr"]
VALUE, ACTION = NAMESPACES["val"], NAMESPACES["act"]

MAX_DEPTH = 50
MAX_WIDTH = 1024
MAX_NODES = int(os.environ.get("FORGE_A11Y_MAX_NODES", "20000"))
TIME_BUDGET_S = float(os.environ.get("FORGE_A11Y_TIME_BUDGET_S", "25"))
MAX_TEXT = 65536

# Application names as OSWorld's tasks expect them: the image runs Debian's Chromium as `google-chrome`, and its
# tasks select `application[name=Google\ Chrome]`.
APP_NAME_ALIASES = {"Chromium": "Google Chrome", "chromium": "Google Chrome"}

for _prefix, _uri in NAMESPACES.items():
    ET.register_namespace(_prefix, _uri)

_LOCK = threading.Lock()  # libatspi is not meant to be driven from several threads at once
_BAD_XML_CHARS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ufffc\ufffd]")
_BAD_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.\-]")


class A11yUnavailable(RuntimeError):
    """The at-spi bindings cannot be imported or the accessibility bus cannot be reached."""


def _atspi() -> Any:
    try:
        import gi  # type: ignore[import-not-found,import-untyped,unused-ignore]

        gi.require_version("Atspi", "2.0")
        from gi.repository import Atspi  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except (ImportError, ValueError) as exc:
        raise A11yUnavailable(
            f"accessibility tree unavailable: pyatspi/gi Atspi bindings are not importable ({exc}); "
            "install python3-pyatspi gir1.2-atspi-2.0"
        ) from exc
    return Atspi


def _clean(text: str) -> str:
    return _BAD_XML_CHARS.sub("", text)


def _attr_name(key: str) -> str | None:
    name = _BAD_NAME_CHARS.sub("_", key.strip())
    if not name:
        return None
    return name if (name[0].isalpha() or name[0] == "_") else "_" + name


def _state_name(state: Any) -> str:
    raw = str(getattr(state, "value_name", "") or state)
    return raw.split("STATE_", 1)[-1].lower()


class _Walk:
    def __init__(self, atspi: Any, deadline: float) -> None:
        self.atspi = atspi
        self.deadline = deadline
        self.nodes = 0
        self.truncated = False

    def budget_left(self) -> bool:
        if self.nodes >= MAX_NODES or time.monotonic() >= self.deadline:
            self.truncated = True
            return False
        return True

    def element(self, acc: Any, depth: int, app_level: bool = False) -> ET.Element:
        A = self.atspi
        self.nodes += 1
        role = (acc.get_role_name() or "").strip() or "unknown"
        attrs: dict[str, str] = {}
        name = acc.get_name() or ""
        if app_level:
            name = APP_NAME_ALIASES.get(name, name)
        attrs["name"] = _clean(name)
        states = set()
        try:
            for st in acc.get_state_set().get_states():
                states.add(_state_name(st))
                attrs[f"{{{STATE}}}{_state_name(st)}"] = "true"
        except Exception:
            pass
        try:
            for key, val in (acc.get_attributes() or {}).items():
                key_name = _attr_name(str(key))
                if key_name:
                    attrs[f"{{{ATTRIBUTES}}}{key_name}"] = _clean(str(val))
        except Exception:
            pass
        try:
            desc = acc.get_description()
            if desc:
                attrs.setdefault(f"{{{ATTRIBUTES}}}description", _clean(desc))
        except Exception:
            pass
        ifaces = set()
        with contextlib.suppress(Exception):
            ifaces = set(acc.get_interfaces() or [])
        if "Component" in ifaces and {"showing", "visible"} <= states:
            try:
                r = A.Component.get_extents(acc, A.CoordType.SCREEN)
                attrs[f"{{{COMPONENT}}}screencoord"] = f"({r.x}, {r.y})"
                attrs[f"{{{COMPONENT}}}size"] = f"({r.width}, {r.height})"
            except Exception:
                pass
        text = ""
        if "Text" in ifaces:
            try:
                n = min(int(A.Text.get_character_count(acc)), MAX_TEXT)
                text = _clean(A.Text.get_text(acc, 0, n) or "")
            except Exception:
                text = ""
        if "Image" in ifaces:
            attrs["image"] = "true"
        if "Selection" in ifaces:
            attrs["selection"] = "true"
        if "Value" in ifaces:
            for key, getter in (("value", "get_current_value"), ("min", "get_minimum_value"),
                                ("max", "get_maximum_value"), ("step", "get_minimum_increment")):
                with contextlib.suppress(Exception):
                    attrs[f"{{{VALUE}}}{key}"] = str(getattr(A.Value, getter)(acc))
        if "Action" in ifaces:
            try:
                for i in range(min(int(A.Action.get_n_actions(acc)), 32)):
                    act = _attr_name((A.Action.get_action_name(acc, i) or "").replace(" ", "-"))
                    if act:
                        attrs[f"{{{ACTION}}}{act}_desc"] = _clean(A.Action.get_action_description(acc, i) or "")
                        attrs[f"{{{ACTION}}}{act}_kb"] = _clean(A.Action.get_key_binding(acc, i) or "")
            except Exception:
                pass
        if "Document" in ifaces:
            try:
                attrs[f"{{{DOCUMENT}}}locale"] = _clean(A.Document.get_locale(acc) or "")
                for key, val in (A.Document.get_document_attributes(acc) or {}).items():
                    key_name = _attr_name(str(key))
                    if key_name:
                        attrs[f"{{{DOCUMENT_ATTRIBUTES}}}{key_name}"] = _clean(str(val))
            except Exception:
                pass
        elem = ET.Element(role.replace(" ", "-"), attrs)
        if text:
            elem.text = text
        if depth < MAX_DEPTH:
            self.children(acc, elem, depth + 1)
        return elem

    def children(self, acc: Any, elem: ET.Element, depth: int, app_level: bool = False) -> None:
        try:
            count = int(acc.get_child_count())
        except Exception:
            return
        kids = self.visible_cells(acc) if count > MAX_WIDTH else None
        for i in range(min(count, MAX_WIDTH)) if kids is None else range(len(kids)):
            if not self.budget_left():
                return
            try:
                child = acc.get_child_at_index(i) if kids is None else kids[i]
                if child is None:
                    continue
                elem.append(self.element(child, depth, app_level))
            except Exception:  # an object that went away or an application that does not answer
                continue

    def visible_cells(self, table: Any) -> list[Any] | None:
        """A huge table's (a spreadsheet's) on-screen cells, row by row from its top-left visible cell; None when
        it is no Table. Its children in index order would be the first row's first MAX_WIDTH cells only."""
        A = self.atspi
        try:
            if "Table" not in (table.get_interfaces() or []):
                return None
            rows, cols = int(A.Table.get_n_rows(table)), int(A.Table.get_n_columns(table))
        except Exception:
            return None
        row0 = col0 = 0
        with contextlib.suppress(Exception):
            r = A.Component.get_extents(table, A.CoordType.SCREEN)
            first = A.Component.get_accessible_at_point(table, r.x + 1, r.y + 1, A.CoordType.SCREEN)
            if first is not None:
                index = first.get_index_in_parent()
                row0, col0 = int(A.Table.get_row_at_index(table, index)), int(A.Table.get_column_at_index(table, index))
        cells: list[Any] = []
        for row in range(max(row0, 0), min(rows, row0 + 500)):
            found = 0
            for col in range(max(col0, 0), min(cols, col0 + 200)):
                try:
                    cell = A.Table.get_accessible_at(table, row, col)
                    showing = cell is not None and cell.get_state_set().contains(A.StateType.SHOWING)
                except Exception:
                    showing = False
                if not showing:
                    break
                cells.append(cell)
                found += 1
            if not found or len(cells) >= MAX_NODES or time.monotonic() >= self.deadline:
                break
        return cells


def accessibility_tree_xml(time_budget_s: float | None = None) -> str:
    """The whole desktop's accessibility tree as an XML string (see the module docstring for the layout)."""
    atspi = _atspi()
    with _LOCK:
        try:
            atspi.init()
            atspi.set_timeout(2000, 15000)
            desktop = atspi.get_desktop(0)
        except Exception as exc:
            raise A11yUnavailable(f"accessibility bus unreachable: {exc}") from exc
        walk = _Walk(atspi, time.monotonic() + (time_budget_s or TIME_BUDGET_S))
        root = ET.Element("desktop-frame")
        walk.children(desktop, root, 1, app_level=True)
    return ET.tostring(root, encoding="unicode")


def terminal_text(time_budget_s: float = 10.0) -> str | None:
    """The text of the first at-spi node with role `terminal` (e.g. GNOME Terminal's), or None when there is none.

    xterm exposes no accessibility tree, so its content is never found here.
    """
    atspi = _atspi()
    deadline = time.monotonic() + time_budget_s
    with _LOCK:
        try:
            atspi.init()
            desktop = atspi.get_desktop(0)
        except Exception as exc:
            raise A11yUnavailable(f"accessibility bus unreachable: {exc}") from exc
        stack: list[tuple[Any, int]] = [(desktop, 0)]
        while stack and time.monotonic() < deadline:
            acc, depth = stack.pop()
            try:
                if acc.get_role_name() == "terminal" and "Text" in (acc.get_interfaces() or []):
                    n = min(int(atspi.Text.get_character_count(acc)), 10 * MAX_TEXT)
                    return _clean(atspi.Text.get_text(acc, 0, n) or "")
                if depth < MAX_DEPTH:
                    count = min(int(acc.get_child_count()), MAX_WIDTH)
                    stack.extend((acc.get_child_at_index(i), depth + 1) for i in reversed(range(count)))
            except Exception:
                continue
    return None
