"""``forge_cli.eval.report``: eval.json round trip, the self-contained report.html (also rendered by a headless
Chromium: DOM and screenshot), and the terminal table on a terminal and off one."""

from __future__ import annotations

import io
import json
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from forge_cli.eval.html import SERIES_COLOURS, link_target
from forge_cli.eval.model import EvalReport
from forge_cli.eval.report import render_table, write_reports
from tests.eval import trial
from tests.requires import requires

CATEGORIES = ["files", "git", 'py "<scripts>"']
NASTY_TASK = "<script>alert('x')</script>&task"


def run_trials(run_dir: Path, outside: Path) -> list[dict[str, Any]]:
    """9 tasks over 3 categories, K=3, one infra error, one task named to break unescaped HTML, one log outside."""
    trials = []
    for i in range(9):
        task_id = NASTY_TASK if i == 8 else f"task-{i:02d}"
        for j in range(3):
            ok = (i * 5 + j * 2) % 4 < 2
            infra = (i, j) == (4, 1)
            logs = outside / "elsewhere" if (i, j) == (0, 0) else run_dir / "rollouts" / f"r{i}-{j}"
            trials.append(trial(task_id, j, None if infra else ok, 0.9 if ok else 0.2, category=CATEGORIES[i % 3],
                                status="infra_error" if infra else "ok", logs=str(logs), rollout_id=f"r{i}-{j}"))
    return trials


def run_meta(run_dir: Path) -> dict[str, Any]:
    return {"run_id": "eval-test", "run_dir": str(run_dir), "harness": "react", "env": "builtin", "split": "test",
            "model": "smollm2-135m", "trials": 3, "temperature": 0.7, "started": "2025-01-01T00:00:00+00:00",
            "duration_s": 12.5, "config": {"harness": {"name": "react"}, "env": {"note": "</pre><b>bold</b>"},
                                            "paths": [run_dir]}}


@pytest.fixture
def report(tmp_path: Path) -> EvalReport:
    run_dir = tmp_path / "run"
    return write_reports(run_trials(run_dir, tmp_path), run_meta(run_dir), run_dir)


class TaskRows(HTMLParser):
    """Collects the ``data-task`` of every ``<tr class="task-row">`` and every href / src."""

    def __init__(self) -> None:
        super().__init__()
        self.tasks: list[str] = []
        self.refs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "tr" and "task-row" in (a.get("class") or "").split():
            self.tasks.append(a.get("data-task") or "")
        self.refs += [v for k, v in attrs if k in ("href", "src") and v]


def parse(page: str) -> TaskRows:
    p = TaskRows()
    p.feed(page)
    return p


def test_eval_json_round_trip(report: EvalReport) -> None:
    data = json.loads(report.json_path.read_text())
    assert data == report.to_dict()
    assert data["meta"]["run_id"] == "eval-test"
    assert data["meta"]["config"]["paths"] == [str(report.out_dir)]  # made JSON-native
    assert data["ks"] == [1, 3] and data["trials_per_task"] == 3
    assert set(data["categories"]) == set(CATEGORIES)
    assert len(data["tasks"]) == 9
    row = next(t for t in data["tasks"] if t["task_id"] == "task-04")
    assert (row["n"], row["infra_errors"], row["pass_at"]["3"]) == (2, 1, None)
    assert [t["trial"] for t in row["trials"]] == [0, 1, 2]
    assert [(t["task_id"], t["trial"]) for t in data["infra_errors"]] == [("task-04", 1)]
    assert data["overall"]["infra_errors"] == 1 and data["overall"]["trials"] == 26
    assert data["overall"]["pass_at"]["1"]["method"] == "bootstrap"


def test_html_has_one_row_per_task_escapes_and_links(report: EvalReport) -> None:
    page = report.html_path.read_text()
    parsed = parse(page)
    assert sorted(parsed.tasks) == sorted({t.task_id for t in report.metrics.tasks})
    assert page.count('class="task-row"') == 9
    # escaped everywhere: the task id, the category with quotes, the config's closing tag
    assert NASTY_TASK not in page and "<script" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;&amp;task" in page
    assert "&lt;/pre&gt;&lt;b&gt;bold&lt;/b&gt;" in page and "<b>bold</b>" not in page
    assert '<details><summary>Experiment config</summary><pre>' in page
    # self-contained: no script, stylesheet, image or font from anywhere, the only URL is the SVG namespace
    assert "<link" not in page and "url(" not in page and "@import" not in page
    assert page.replace('xmlns="http://www.w3.org/2000/svg"', "").count("http") == 0
    assert '<svg class="chart"' in page and all(c in page for c in SERIES_COLOURS)
    # links: logs and calls relative inside the report's directory, file:// outside it
    assert "rollouts/r1-2/" in parsed.refs
    assert (report.out_dir.parent / "elsewhere").as_uri() + "/" in parsed.refs
    assert all(r.startswith(("rollouts/", "file://")) for r in parsed.refs)


def test_link_target(tmp_path: Path) -> None:
    assert link_target(tmp_path / "run" / "rollouts" / "a b#1", tmp_path / "run") == "rollouts/a%20b%231/"
    assert link_target(tmp_path / "x", tmp_path / "run") == (tmp_path / "x").as_uri() + "/"


def test_render_table_plain_when_not_a_terminal(report: EvalReport) -> None:
    out = io.StringIO()
    render_table(report, Console(file=out, force_terminal=False, width=80))
    text = out.getvalue()
    lines = text.splitlines()
    assert lines[0].startswith("forge eval eval-test: react on builtin")
    assert lines[1].split()[:4] == ["group", "tasks", "trials", "infra"]
    assert lines[2].split()[:4] == ["overall", "9", "26", "1"]
    assert all(any(line.startswith(c) for line in lines) for c in CATEGORIES)
    assert "\x1b[" not in text and "┃" not in text and "│" not in text
    assert "pass^3" in text and "pass^1" not in text  # pass^1 is pass@1
    assert f"{report.metrics.overall.mean_score.format()}" in lines[2]


def test_render_table_rich_on_a_terminal(report: EvalReport) -> None:
    out = io.StringIO()
    render_table(report, Console(file=out, force_terminal=True, width=220))
    text = out.getvalue()
    assert "┃" in text and "overall" in text and 'py "<scripts>"' in text


def test_a_run_without_trials_still_reports(tmp_path: Path) -> None:
    report = write_reports([], {"run_id": "empty", "trials": 3}, tmp_path / "out")
    data = json.loads(report.json_path.read_text())
    assert data["tasks"] == [] and data["overall"]["tasks"] == 0 and data["overall"]["mean_score"]["value"] is None
    assert parse(report.html_path.read_text()).tasks == []
    out = io.StringIO()
    render_table(report, Console(file=out, force_terminal=False))
    assert out.getvalue().splitlines()[2].split()[:2] == ["overall", "0"]


# --- the page as a browser renders it ---------------------------------------------------------------------------

def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    requires("chromium")
    exe = shutil.which("chromium")
    assert exe is not None
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}",
           "--window-size=1280,1600", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True)


def decode_png(data: bytes) -> tuple[int, int, list[tuple[int, int, int]]]:
    """(width, height, RGB pixels) of an 8-bit RGB/RGBA non-interlaced PNG, with the stdlib only."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, ihdr = 8, b"", (0, 0, 0, 0, 0, 0, 0)
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        body, pos = data[pos + 8:pos + 8 + length], pos + 12 + length
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
    width, height, depth, colour, _, _, interlace = ihdr
    assert depth == 8 and colour in (2, 6) and interlace == 0, f"unexpected PNG format {ihdr}"
    bpp, raw = (3 if colour == 2 else 4), zlib.decompress(idat)
    stride, prev, pixels = width * bpp, bytearray(width * bpp), []
    for y in range(height):
        kind_byte, cur = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride) if kind_byte else ():
            a = cur[i - bpp] if i >= bpp else 0
            b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
            if kind_byte == 1:
                cur[i] = (cur[i] + a) & 0xFF
            elif kind_byte == 2:
                cur[i] = (cur[i] + b) & 0xFF
            elif kind_byte == 3:
                cur[i] = (cur[i] + ((a + b) >> 1)) & 0xFF
            else:  # Paeth
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                cur[i] = (cur[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        pixels += [(cur[x], cur[x + 1], cur[x + 2]) for x in range(0, stride, bpp)]
        prev = cur
    return width, height, pixels


def test_chromium_renders_the_report(report: EvalReport, tmp_path: Path) -> None:
    url = report.html_path.resolve().as_uri()
    dom = chromium(tmp_path, "--dump-dom", url).stdout
    assert sorted(parse(dom).tasks) == sorted(t.task_id for t in report.metrics.tasks)

    shot = tmp_path / "report.png"
    chromium(tmp_path, f"--screenshot={shot}", url)
    width, height, pixels = decode_png(shot.read_bytes())
    assert (width, height) == (1280, 1600)
    colours = set(pixels)
    assert len(colours) > 20, f"only {len(colours)} distinct colours: blank page?"
    non_white = sum(1 for p in pixels if min(p) < 245) / len(pixels)
    assert non_white > 0.2, f"only {non_white:.0%} of the page is not white"
    # the chart's bars were drawn: solid pixels in the first series' colour
    r, g, b = (int(SERIES_COLOURS[0][i:i + 2], 16) for i in (1, 3, 5))
    bar = sum(1 for p in pixels if abs(p[0] - r) <= 4 and abs(p[1] - g) <= 4 and abs(p[2] - b) <= 4)
    assert bar > 500, f"only {bar} pixels of the pass@1 bar colour"

