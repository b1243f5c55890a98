"""``forge eval``'s reports: ``eval.json``, a self-contained ``report.html``, and a terminal table.

``write_reports(trials, meta, out_dir)`` computes the metrics (:func:`forge_cli.eval.metrics.aggregate`, K from
``meta["trials"]``) and writes, in ``out_dir`` (created if missing):

- ``eval.json``, exactly :meth:`forge_cli.eval.model.EvalReport.to_dict`::

      {"schema": 1, "meta": {...}, "trials_per_task": K, "ks": [1, K],
       "overall": GroupMetrics, "exposure": {"seen": GroupMetrics, "unseen/not guided": ..., ...},
       "categories": {name: GroupMetrics},
       "tasks": [TaskMetrics + {"trials": [trial dicts, by trial index]}],
       "infra_errors": [the trial dicts left out as infra errors]}

  (``GroupMetrics`` / ``TaskMetrics`` as their ``to_dict()``; ``meta`` and the trials as handed over, made
  JSON-native: anything JSON cannot hold becomes its ``str``.)
- ``report.html`` (:mod:`forge_cli.eval.html`): one file with no external resource.

``render_table(report, console)`` prints overall and per-category metrics with their 95% intervals: a rich table
on a terminal, aligned plain text otherwise (pipes, files, CI logs). ``print_table`` is the shared printer,
also used by :mod:`forge_cli.eval.compare`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from forge_cli.eval.html import render_html
from forge_cli.eval.metrics import aggregate, is_infra, trials_by_task
from forge_cli.eval.model import EvalReport, json_native


def build_report(trials: Iterable[Mapping[str, Any]], meta: Mapping[str, Any], out_dir: Path) -> EvalReport:
    """The report of ``trials`` without writing anything (``write_reports`` writes it)."""
    grouped: dict[str, list[dict[str, Any]]] = json_native(trials_by_task(trials))
    k = meta.get("trials")
    metrics = aggregate([t for ts in grouped.values() for t in ts], trials_per_task=int(k) if k else None)
    infra = [t for ts in grouped.values() for t in ts if is_infra(t)]
    return EvalReport(meta=json_native(dict(meta)), metrics=metrics, trials=grouped, out_dir=Path(out_dir),
                      infra_errors=infra)


def write_reports(trials: Iterable[Mapping[str, Any]], meta: Mapping[str, Any], out_dir: Path) -> EvalReport:
    """Compute the metrics and write ``eval.json`` and ``report.html`` into ``out_dir``; return the report."""
    report = build_report(trials, meta, out_dir)
    report.out_dir.mkdir(parents=True, exist_ok=True)
    report.json_path.write_text(json.dumps(report.to_dict(), indent=2) + "\n", encoding="utf-8")
    report.html_path.write_text(render_html(report), encoding="utf-8")
    return report


def print_table(console: Console, title: str, headers: Sequence[str], rows: Sequence[Sequence[str]],
                footer: str | None = None, text_columns: int = 1) -> None:
    """A rich table on a terminal; aligned plain text (no colour, no box drawing) when the console is not one.

    The first ``text_columns`` columns are left-aligned names, the others right-aligned numbers.
    """
    if console.is_terminal:
        table = Table(title=Text(title), title_justify="left")
        for i, h in enumerate(headers):
            table.add_column(Text(h), justify="left" if i < text_columns else "right", no_wrap=i < text_columns)
        for row in rows:
            table.add_row(*(Text(cell) for cell in row))
        console.print(table)
    else:
        widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
        lines = [title] + ["  ".join(cell.ljust(w) if i < text_columns else cell.rjust(w)
                                     for i, (cell, w) in enumerate(zip(cells, widths, strict=True))).rstrip()
                           for cells in [headers, *rows]]
        console.print("\n".join(lines), markup=False, highlight=False, soft_wrap=True)
    if footer:
        console.print(footer, markup=False, highlight=False, soft_wrap=True)


def render_table(report: EvalReport, console: Console) -> None:
    """Overall and per-category metrics with their 95% intervals (see :func:`print_table` for the output)."""
    m = report.metrics
    headers, rows = m.summary()
    meta = report.meta
    title = (f"forge eval {meta.get('run_id', '')}: {meta.get('harness', '?')} on {meta.get('env', '?')}"
             f" ({meta.get('model', '?')}), K={m.trials_per_task}")
    footer = ("95% intervals: bootstrap over task types (mean score, pass@k, pass^k; a template's tasks drawn "
              "together), Wilson over trials (pass rate)"
              + ("; seen / unseen: task types the training split has / has not, guided: the command is shown"
                 if m.exposure else "") + f"; {m.overall.infra_errors} infra error(s) left out of the counts")
    print_table(console, title, headers, rows, footer)
