"""``report.html`` of ``forge eval``: one self-contained page, written by :func:`forge_cli.eval.report.write_reports`.

The page has inline CSS and an inline SVG chart made here; no script, font, stylesheet or image is loaded from
anywhere, so it opens the same from a laptop, a CI artifact or a mail attachment. It shows, in order:

- the run (id, harness, env / split, model, K, temperature, start, duration, run directory);
- a bar chart (``<svg class="chart">``): one group of bars per category (overall first) for pass@1, pass@K and
  pass^K, each bar with its 95% interval as a whisker and a ``<title>`` tooltip;
- the summary table of :meth:`forge_cli.eval.metrics.EvalMetrics.summary` (overall, the held-out view's groups
  where tasks say whether their type was trained on, then the categories);
- one ``<tr class="task-row" data-task="ID">`` per task (``class="task-row unseen"`` for a task whose type training
  never saw): id, category, its type (template, "unseen" and "guided" marked), counted trials, passes, infra errors,
  mean score, pass@k and pass^k per reported k, and per trial a link to its logs directory (``trial["logs"]``)
  and to its calls (``<run_dir>/rollouts/<rollout_id>/``); a link is relative to the report's directory when the
  target is inside it, else a ``file://`` URL;
- the infra errors left out of the counts;
- the composed experiment config in a ``<details><pre>`` block (YAML).

Every value taken from the run is escaped with :func:`html.escape` (text and attributes).
"""

from __future__ import annotations

import html
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import yaml

from forge_cli.eval.metrics import Estimate, GroupMetrics, TaskMetrics, fmt, is_infra, shown_hat_ks

if TYPE_CHECKING:
    from forge_cli.eval.model import EvalReport

SERIES_COLOURS = ("#4e79a7", "#f28e2b", "#59a14f")
# chart geometry, in px
PLOT_H, TOP, LEFT, BOTTOM, RIGHT = 220, 44, 44, 52, 16
BAR_W, BAR_GAP, GROUP_GAP, LABEL_CHARS = 24, 8, 36, 18

CSS = """
:root { color-scheme: light; }
body { margin: 0; padding: 24px 32px; background: #eef1f5; color: #1d2330;
       font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 0 0 10px; }
section { background: #fff; border: 1px solid #d5dbe3; border-radius: 8px; padding: 16px 20px; margin: 16px 0; }
.sub { color: #5a6475; margin: 0 0 12px; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 0; }
dl.meta dt { color: #5a6475; } dl.meta dd { margin: 0; font-family: ui-monospace, "DejaVu Sans Mono", monospace; }
.chart-wrap { overflow-x: auto; }
table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
th, td { padding: 5px 8px; border-bottom: 1px solid #e3e7ed; text-align: right; vertical-align: top;
         white-space: nowrap; }
th { background: #f4f6f9; color: #3a4252; font-weight: 600; position: sticky; top: 0; }
th.l, td.l { text-align: left; }
tr.task-row:nth-child(even) { background: #fafbfc; }
td.trials { white-space: normal; text-align: left; min-width: 260px; }
table.infra td:last-child { white-space: normal; }
.trial { display: inline-block; margin: 1px 6px 1px 0; padding: 0 6px; border-radius: 10px; font-size: 12px; }
.trial.pass { background: #dcf2e0; } .trial.fail { background: #f9dcdc; } .trial.infra { background: #e6e8ec; }
.tag { display: inline-block; margin-left: 6px; padding: 0 6px; border-radius: 10px; font-size: 12px; }
.tag.unseen { background: #fde9c8; } .tag.guided { background: #e3e9f6; }
a { color: #1f5fa8; text-decoration: none; } a:hover { text-decoration: underline; }
pre { background: #f4f6f9; padding: 12px; overflow-x: auto; font-size: 12px; }
.none { color: #5a6475; }
"""


def esc(value: object) -> str:
    """Escape any value for HTML text or a quoted attribute."""
    return html.escape(str(value), quote=True)


def link_target(path: str | os.PathLike[str], base: Path) -> str:
    """An href for the directory ``path``: relative to ``base`` when inside it, else a ``file://`` URL.

    Relative paths (``path`` and ``base``) are taken from the current directory, as everywhere else.
    """
    target = Path(os.path.abspath(path))
    try:
        rel = target.relative_to(os.path.abspath(base))
    except ValueError:
        return target.as_uri() + "/"
    return quote(rel.as_posix()) + "/"


def _svg_text(x: float, y: float, text: str, cls: str = "", anchor: str = "middle", title: str | None = None) -> str:
    tip = f"<title>{esc(title)}</title>" if title else ""
    attr = f' class="{esc(cls)}"' if cls else ""
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{attr}>{tip}{esc(text)}</text>'


def _bar(x: float, e: Estimate, colour: str, tip: str) -> str:
    """One bar with its interval whisker; an estimate without a value draws ``n/a``."""
    def y(v: float) -> float:
        return TOP + PLOT_H * (1.0 - max(0.0, min(1.0, v)))

    if e.value is None:
        return _svg_text(x + BAR_W / 2, y(0) - 4, "n/a", "na")
    top = y(e.value)
    parts = [f'<rect x="{x:.1f}" y="{top:.1f}" width="{BAR_W}" height="{max(y(0) - top, 1.5):.1f}" '
             f'fill="{colour}"><title>{esc(tip)}</title></rect>']
    label_y = top
    if e.low is not None and e.high is not None:
        cx, lo, hi = x + BAR_W / 2, y(e.low), y(e.high)
        parts.append(f'<path class="ci" d="M{cx:.1f} {lo:.1f}V{hi:.1f}M{cx - 5:.1f} {lo:.1f}h10M{cx - 5:.1f} '
                     f'{hi:.1f}h10"/>')
        label_y = hi
    parts.append(_svg_text(x + BAR_W / 2, label_y - 4, fmt(e.value, 2), "val"))
    return "".join(parts)


def chart_svg(groups: Sequence[GroupMetrics], series: Sequence[tuple[str, Callable[[GroupMetrics], Estimate]]]) -> str:
    """Grouped bars (one group per entry of ``groups``, one bar per series) on a 0..1 axis, with CI whiskers."""
    group_w = len(series) * BAR_W + (len(series) - 1) * BAR_GAP
    width = max(LEFT + len(groups) * (group_w + GROUP_GAP) + RIGHT, 360)
    height = TOP + PLOT_H + BOTTOM
    out = [f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="pass@k and pass^k per category">',
           "<style>text{font:11px system-ui,sans-serif;fill:#3a4252}.val{font-size:10px}.grp{font-size:12px}"
           ".ci{stroke:#1d2330;stroke-width:1.3;fill:none}.grid{stroke:#e3e7ed}.axis{stroke:#8a93a3}</style>"]
    for i in range(5):
        v = i / 4
        yv = TOP + PLOT_H * (1 - v)
        out.append(f'<line class="{"axis" if i == 0 else "grid"}" x1="{LEFT}" x2="{width - RIGHT}" '
                   f'y1="{yv:.1f}" y2="{yv:.1f}"/>')
        out.append(_svg_text(LEFT - 6, yv + 4, f"{v:.2f}", anchor="end"))
    for j, (name, _) in enumerate(series):
        lx = LEFT + j * 110
        out.append(f'<rect x="{lx}" y="10" width="12" height="12" fill="{SERIES_COLOURS[j % len(SERIES_COLOURS)]}"/>')
        out.append(_svg_text(lx + 17, 20, name, anchor="start"))
    for g_i, g in enumerate(groups):
        x0 = LEFT + GROUP_GAP / 2 + g_i * (group_w + GROUP_GAP)
        for j, (name, pick) in enumerate(series):
            e = pick(g)
            tip = f"{g.name} {name} = {e.format()} over {e.n} task(s)"
            out.append(_bar(x0 + j * (BAR_W + BAR_GAP), e, SERIES_COLOURS[j % len(SERIES_COLOURS)], tip))
        label = g.name if len(g.name) <= LABEL_CHARS else g.name[:LABEL_CHARS - 1] + "…"
        cx = x0 + group_w / 2
        out.append(_svg_text(cx, TOP + PLOT_H + 18, label, "grp", title=g.name))
        out.append(_svg_text(cx, TOP + PLOT_H + 34, f"{g.tasks} task(s)"))
    out.append("</svg>")
    return "".join(out)


def chart_series(ks: Sequence[int]) -> list[tuple[str, Callable[[GroupMetrics], Estimate]]]:
    """pass@1, pass@K and pass^K for the smallest and largest reported k (just pass@1 when K is 1)."""
    lo, hi = min(ks), max(ks)
    series: list[tuple[str, Callable[[GroupMetrics], Estimate]]] = [(f"pass@{lo}", lambda g: g.pass_at[lo])]
    if hi != lo:
        series += [(f"pass@{hi}", lambda g: g.pass_at[hi]), (f"pass^{hi}", lambda g: g.pass_hat[hi])]
    return series


def _cell(tag: str, text: str, left: bool) -> str:
    """A ``th`` / ``td``; text columns are left-aligned (class ``l``), numbers right-aligned."""
    cls = ' class="l"' if left else ""
    return f"<{tag}{cls}>{esc(text)}</{tag}>"


def _head(headers: Sequence[str], left: Sequence[int] = (0,)) -> str:
    return "<thead><tr>" + "".join(_cell("th", h, i in left) for i, h in enumerate(headers)) + "</tr></thead>"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], cls: str, left: Sequence[int] = (0,)) -> str:
    body = "".join("<tr>" + "".join(_cell("td", c, i in left) for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f'<table class="{cls}">{_head(headers, left)}<tbody>{body}</tbody></table>'


def _trial_links(trials: Sequence[Mapping[str, Any]], out_dir: Path, run_dir: Path) -> str:
    links = []
    for t in trials:
        kind = "infra" if is_infra(t) else ("pass" if t.get("passed") is True else "fail")
        mark = {"pass": "✓", "fail": "✗", "infra": "infra"}[kind]
        tip = (f"trial {t.get('trial')}: {t.get('status')}, reward {fmt(t.get('reward'))}, {t.get('calls', 0)} "
               f"call(s), {fmt(t.get('duration_s'), 1)} s" + (f"; {str(t['error'])[:300]}" if t.get("error") else ""))
        logs = f'<a href="{esc(link_target(t["logs"], out_dir))}">logs</a>' if t.get("logs") else "no logs"
        calls = link_target(run_dir / "rollouts" / str(t.get("rollout_id", "")), out_dir)
        links.append(f'<span class="trial {kind}" title="{esc(tip)}">#{esc(t.get("trial"))} {mark} {logs} · '
                     f'<a href="{esc(calls)}">{esc(t.get("calls", 0))} calls</a></span>')
    return "".join(links)


def _type_cell(t: TaskMetrics) -> str:
    """The task's type: its template (or -), tagged "unseen" when training never saw it and "guided" when its
    instruction shows the command."""
    tags = ('<span class="tag unseen" title="no task of this type is in the training split">unseen</span>'
            if t.seen is False else "") + ('<span class="tag guided" title="the instruction shows the command">'
                                           "guided</span>" if t.guided else "")
    return f'<td class="l">{esc(t.template or "-")}{tags}</td>'


def _task_row(t: TaskMetrics, ks: Sequence[int], trials: Sequence[Mapping[str, Any]], out_dir: Path,
              run_dir: Path) -> str:
    cells = [str(t.n), str(t.passes), str(t.infra_errors), fmt(t.mean_score),
             *(fmt(t.pass_at[k]) for k in ks), *(fmt(t.pass_hat[k]) for k in shown_hat_ks(ks))]
    cls = "task-row unseen" if t.seen is False else "task-row"
    return (f'<tr class="{cls}" data-task="{esc(t.task_id)}">{_cell("td", t.task_id, True)}'
            + _cell("td", t.category, True) + _type_cell(t) + "".join(_cell("td", c, False) for c in cells)
            + f'<td class="trials">{_trial_links(trials, out_dir, run_dir)}</td></tr>')


def _meta_list(meta: Mapping[str, Any], m_tasks: int) -> str:
    duration = meta.get("duration_s")
    items = [("run", meta.get("run_id")), ("harness", meta.get("harness")),
             ("env / split", f"{meta.get('env', '-')} / {meta.get('split', '-')}"), ("model", meta.get("model")),
             ("trials per task (K)", meta.get("trials")), ("temperature", meta.get("temperature")),
             ("tasks", m_tasks), ("started", meta.get("started")),
             ("duration", f"{float(duration):.1f} s" if isinstance(duration, int | float) else duration),
             ("run directory", meta.get("run_dir"))]
    return '<dl class="meta">' + "".join(f"<dt>{esc(k)}</dt><dd>{esc('-' if v is None else v)}</dd>"
                                         for k, v in items) + "</dl>"


def render_html(report: EvalReport) -> str:
    """The whole ``report.html`` page of ``report`` (links relative to ``report.out_dir``)."""
    m, meta, out_dir = report.metrics, report.meta, report.out_dir
    run_dir = Path(meta.get("run_dir") or out_dir)
    ks = m.ks
    task_headers = ["task", "category", "type", "trials", "passes", "infra", "mean score",
                    *(f"pass@{k}" for k in ks), *(f"pass^{k}" for k in shown_hat_ks(ks)), "trials (logs · calls)"]
    task_rows = "".join(_task_row(t, ks, report.trials.get(t.task_id, []), out_dir, run_dir) for t in m.tasks)
    summary_headers, summary_rows = m.summary()
    infra_rows = [[str(t.get("task_id")), str(t.get("trial")), str(t.get("rollout_id")), str(t.get("status")),
                   str(t.get("error") or "")] for t in report.infra_errors]
    infra = (_table(["task", "trial", "rollout", "status", "error"], infra_rows, "infra", (0, 2, 3, 4)) if infra_rows
             else '<p class="none">No infra errors.</p>')
    config = yaml.safe_dump(meta.get("config") or {}, sort_keys=False, allow_unicode=True)
    title = f"forge eval {meta.get('run_id', '')}"
    return "\n".join([
        "<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
        f'<p class="sub">{esc(meta.get("harness", "?"))} on {esc(meta.get("env", "?"))} with '
        f'{esc(meta.get("model", "?"))}: {m.overall.tasks} task(s) &times; K={m.trials_per_task}, '
        f"{m.overall.infra_errors} infra error(s) left out</p>",
        f"<section><h2>Run</h2>{_meta_list(meta, m.overall.tasks)}</section>",
        '<section><h2>pass@k and pass^k per category</h2><p class="sub">Bars: mean over tasks; whiskers: 95% '
        'bootstrap interval over task types.</p><div class="chart-wrap">'
        + chart_svg([m.overall, *m.categories.values()], chart_series(ks)) + "</div></section>",
        '<section><h2>Summary</h2><p class="sub">95% intervals: bootstrap over task types (mean score, pass@k, '
        "pass^k: the tasks of one template are drawn together); Wilson over trials (pass rate). seen / unseen: "
        "task types the training split has / has not; guided: the instruction shows the command.</p>"
        + _table(summary_headers, summary_rows, "summary")
        + "</section>",
        '<section><h2>Tasks</h2><table class="tasks">'
        + _head(task_headers, (0, 1, 2, len(task_headers) - 1)) + f"<tbody>{task_rows}</tbody></table>"
        + "</section>",
        f"<section><h2>Infra errors</h2>{infra}</section>",
        f"<section><details><summary>Experiment config</summary><pre>{esc(config)}</pre></details></section>",
        "</body></html>", ""])
