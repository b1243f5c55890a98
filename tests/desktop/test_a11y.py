"""Pruning and capping OSWorld's accessibility tree, against hand-written trees and hand-computed tables."""

from __future__ import annotations

import pytest

from forge_cli.desktop.a11y import (
    HEADER,
    NS_COMPONENT,
    NS_STATE,
    NS_VALUE,
    PREAMBLE,
    A11yNode,
    estimate_tokens,
    parse_nodes,
    render_nodes,
    render_tree,
)

ON = 'st:showing="true" st:visible="true" st:enabled="true"'
# 18 nodes in OSWorld's Ubuntu format; 8 are kept (marked +)
TREE = f"""<desktop-frame xmlns:st="{NS_STATE}" xmlns:cp="{NS_COMPONENT}" xmlns:val="{NS_VALUE}" name="main">
<application name="gedit">
<frame name="notes.txt - gedit" {ON} cp:screencoord="(0, 0)" cp:size="(1920, 1080)">
<filler {ON} cp:screencoord="(0, 40)" cp:size="(1920, 1000)"/>
<push-button name="Open" {ON} cp:screencoord="(10, 5)" cp:size="(60, 30)"/>
<push-button name="Save" st:showing="true" st:visible="false" cp:screencoord="(80, 5)" cp:size="(60, 30)"/>
<push-button name="Hidden" st:visible="true" cp:screencoord="(150, 5)" cp:size="(60, 30)"/>
<push-button name="Flat" {ON} cp:screencoord="(220, 5)" cp:size="(0, 30)"/>
<push-button name="Offscreen" {ON} cp:screencoord="(-5, 10)" cp:size="(60, 30)"/>
<push-button name="Nowhere" {ON}/>
<entry name="" {ON} cp:screencoord="(100, 50)" cp:size="(300, 24)"/>
<label {ON} cp:screencoord="(200, 100)" cp:size="(50, 20)">Line 1
\tLine 2</label>
<slider name="Zoom" {ON} val:value="50.0" cp:screencoord="(400, 1050)" cp:size="(120, 16)"/>
<menu-item name="Recent Documents and Other Places" {ON} cp:screencoord="(10, 40)" cp:size="(200, 22)"/>
<panel name="" {ON} cp:screencoord="(0, 40)" cp:size="(1920, 30)"/>
<icon name="" {ON} cp:screencoord="(1880, 5)" cp:size="(24, 24)"/>
<check-box name="Wrap&#9;lines" {ON} cp:screencoord="(30, 70)" cp:size="(16, 16)"/>
<push-button name="Evil" {ON} cp:screencoord="__import__('os')" cp:size="(1, 1)"/>
</frame>
</application>
</desktop-frame>"""

LINES = [
    "frame\tnotes.txt - gedit\t\t0,0\t1920,1080",
    "push-button\tOpen\t\t10,5\t60,30",
    "entry\t\t\t100,50\t300,24",
    "label\t\tLine 1 Line 2\t200,100\t50,20",
    "slider\tZoom\t50.0\t400,1050\t120,16",
    "menu-item\tRecent Documents an…\t\t10,40\t200,22",
    "icon\t\t\t1880,5\t24,24",
    "check-box\tWrap lines\t\t30,70\t16,16",
]


def test_pruning_keeps_showing_visible_placed_nodes_with_a_name_text_or_interactive_role() -> None:
    assert parse_nodes(TREE) == [
        A11yNode("frame", "notes.txt - gedit", "", 0, 0, 1920, 1080),
        A11yNode("push-button", "Open", "", 10, 5, 60, 30),
        A11yNode("entry", "", "", 100, 50, 300, 24),
        A11yNode("label", "", "Line 1\n\tLine 2", 200, 100, 50, 20),
        A11yNode("slider", "Zoom", "50.0", 400, 1050, 120, 16),
        A11yNode("menu-item", "Recent Documents and Other Places", "", 10, 40, 200, 22),
        A11yNode("icon", "", "", 1880, 5, 24, 24),
        A11yNode("check-box", "Wrap\tlines", "", 30, 70, 16, 16),
    ]


def test_the_table_has_one_line_per_node_and_says_where_to_click() -> None:
    assert PREAMBLE == "# one element per line; click an element at its centre: x + w/2, y + h/2"
    assert HEADER == "tag\tname\ttext\tposition (x,y)\tsize (w,h)"
    assert render_tree(TREE, max_text=20) == "\n".join([PREAMBLE, HEADER, *LINES])
    assert A11yNode("push-button", "Open", "", 10, 5, 60, 30).centre == (40, 20)


def test_cap_keeps_the_first_nodes_and_counts_the_rest() -> None:
    # 72 + 39 + 38 + 28 + 51 characters and 4 newlines: 232 characters, ceil(232 / 4) = 58 tokens
    two = "\n".join([PREAMBLE, HEADER, LINES[0], LINES[1], "[6 more elements left out to stay within 58 tokens]"])
    assert (len(two), estimate_tokens(two)) == (232, 58)
    assert render_tree(TREE, 58, max_text=20) == two
    # one token less: the second node goes (72 + 39 + 38 + 51 + 3 newlines = 203 characters, 51 tokens)
    assert render_tree(TREE, 57, max_text=20) == "\n".join(
        [PREAMBLE, HEADER, LINES[0], "[7 more elements left out to stay within 57 tokens]"])
    # a budget below the preamble, header and last line still gets them
    assert render_tree(TREE, 10, max_text=20) == "\n".join(
        [PREAMBLE, HEADER, "[8 more elements left out to stay within 10 tokens]"])
    whole = "\n".join([PREAMBLE, HEADER, *LINES])
    assert render_tree(TREE, estimate_tokens(whole), max_text=20) == whole


def test_one_node_left_out_is_singular() -> None:
    # whole: 72 + 39 + 25 + 67 characters and 3 newlines = 206, 52 tokens; without the second node and with the
    # last line (50 characters): 189, 48 tokens
    nodes = [A11yNode("push-button", "OK", "", 0, 0, 10, 10),
             A11yNode("push-button", "Cancel and discard every change made so far", "", 20, 0, 10, 10)]
    assert render_nodes(nodes, 52).count("push-button") == 2
    assert render_nodes(nodes, 50).splitlines()[-2:] == [
        "push-button\tOK\t\t0,0\t10,10", "[1 more element left out to stay within 50 tokens]"]


def test_a_tokenizer_may_count_and_is_called_few_times() -> None:
    nodes = [A11yNode("list-item", f"file {i}.txt", "", 10, 20 * i, 200, 20) for i in range(1000)]
    calls: list[str] = []

    def words(text: str) -> int:
        calls.append(text)
        return len(text.split())

    out = render_nodes(nodes, 500, count_tokens=words)
    kept = out.count("list-item")
    assert words(out) <= 500
    # 17 words of preamble, 7 of header, 10 of the last line; 5 a node ("list-item", "file", "0.txt", "10,0",
    # "200,20"): 34 + 93 * 5 = 499 <= 500 < 504
    assert kept == 93
    assert out.endswith(f"[{1000 - kept} more elements left out to stay within 500 tokens]")
    assert len(calls) <= 13  # one for the whole table, then a binary search


def test_cells_collapse_whitespace_and_truncate() -> None:
    node = A11yNode("text", "a\tb\nc", "x" * 100, 0, 0, 1, 1)
    line = render_nodes([node], 1000, max_text=10).splitlines()[-1]
    assert line == "text\ta b c\txxxxxxxxx…\t0,0\t1,1"
    assert line.count("\t") == 4


def test_empty_tree_and_other_namespaces() -> None:
    empty = f'<desktop-frame xmlns:st="{NS_STATE}"><push-button name="x" st:showing="true"/></desktop-frame>'
    assert render_tree(empty) == "\n".join([PREAMBLE, HEADER, "(no visible elements)"])
    windows = ('<desktop-frame xmlns:st="https://accessibility.windows.example.org/ns/state" '
               'xmlns:cp="https://accessibility.windows.example.org/ns/component"><button name="OK" '
               'st:showing="true" st:visible="true" cp:screencoord="(1, 1)" cp:size="(5, 5)"/></desktop-frame>')
    assert parse_nodes(windows) == []


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="the accessibility tree is not XML"):
        parse_nodes("<desktop-frame><oops></desktop-frame>")
    with pytest.raises(ValueError, match="max_tokens must be at least 1"):
        render_tree(TREE, 0)


def test_token_estimate_is_characters_over_four_rounded_up() -> None:
    assert [estimate_tokens(t) for t in ("", "a", "abcd", "abcde", "é" * 8)] == [0, 1, 1, 2, 2]


def test_a_sheets_empty_cells_are_left_out_and_filled_ones_kept() -> None:
    """LibreOffice exposes every visible cell, empty ones with the value 0.0: only cells with text are listed."""
    sheet = f"""<desktop-frame xmlns:st="{NS_STATE}" xmlns:cp="{NS_COMPONENT}" xmlns:val="{NS_VALUE}">
<table name="Sheet Sheet1" {ON} cp:screencoord="(41, 157)" cp:size="(1806, 839)">
<table-cell name="A1" {ON} cp:screencoord="(41, 157)" cp:size="(82, 17)">Item</table-cell>
<table-cell name="B1" {ON} val:value="3.0" cp:screencoord="(123, 157)" cp:size="(82, 17)">3</table-cell>
<table-cell name="C1" {ON} val:value="0.0" cp:screencoord="(205, 157)" cp:size="(82, 17)"/>
</table></desktop-frame>"""
    assert [(n.name, n.text) for n in parse_nodes(sheet)] == [("Sheet Sheet1", ""), ("A1", "Item"), ("B1", "3")]
