"""Compare two ``forge eval`` runs, B minus A, from their ``eval.json`` (:mod:`forge_cli.eval.report`).

``compare(run_a, run_b)`` takes two run directories (or their ``eval.json`` files). A missing path, a directory
without ``eval.json`` or a file that is not one raises :class:`forge_cli.errors.UserError` (exit code 2).

Compared metrics, per task and aggregated: ``mean score``, ``pass@1`` and ``pass^K`` with K the smaller of the two
runs' trials per task (so runs with different K compare the same quantity). The per-task values are recomputed
from each task's counts in ``eval.json`` (``n``, ``passes``, ``mean_score``) with the functions of
:mod:`forge_cli.eval.metrics`; a value is None where a run has no counted trial for the task (or n < K).

- Tasks in both runs are compared; tasks only in A or only in B are listed (``only_a`` / ``only_b``).
- Overall, per held-out group (``exposure``: seen / unseen, guided or not, where the tasks say) and per category
  (B's category, else A's): over the common tasks where both runs have the metric, A's mean, B's mean and
  ``delta = B - A`` with a 95% paired-bootstrap interval (fixed seed) that resamples task types: the tasks of one
  template are drawn together (a task without one is a type of its own).

``render_comparison(cmp, console)`` prints the aggregates and the tasks whose metrics changed (rich on a
terminal, plain text otherwise, as :func:`forge_cli.eval.report.print_table`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from forge_cli.errors import UserError
from forge_cli.eval.metrics import (
    EXPOSURE_GROUPS,
    bootstrap_mean_ci,
    exposure_groups,
    fmt,
    pass_at_k,
    pass_hat_k,
    task_cluster,
)
from forge_cli.eval.model import JSON_NAME
from forge_cli.eval.report import print_table

FIX = "pass two run directories of `forge eval` (each holds the eval.json it wrote), e.g. runs/<run-id>"


@dataclass
class MetricDiff:
    """A metric in A and B and B minus A; the interval only for aggregates (paired bootstrap over tasks)."""

    a: float | None
    b: float | None
    delta: float | None
    low: float | None = None
    high: float | None = None
    n: int = 0  # tasks where both runs have the metric


@dataclass
class TaskDiff:
    task_id: str
    category: str
    metrics: dict[str, MetricDiff]
    template: str | None = None
    seen: bool | None = None
    guided: bool | None = None

    @property
    def cluster(self) -> str:
        return task_cluster(self.task_id, self.template)


@dataclass
class GroupDiff:
    name: str
    tasks: int  # common tasks in the group
    metrics: dict[str, MetricDiff]


@dataclass
class RunInfo:
    path: str
    run_id: str
    harness: str
    env: str
    model: str
    trials_per_task: int
    tasks: int


@dataclass
class Comparison:
    a: RunInfo
    b: RunInfo
    k: int  # the K of pass^K: the smaller trials per task of the two runs
    metric_names: list[str]
    overall: GroupDiff
    categories: dict[str, GroupDiff]
    tasks: list[TaskDiff]  # common tasks, by id
    only_a: list[str]
    only_b: list[str]
    exposure: dict[str, GroupDiff] = field(default_factory=dict)  # EXPOSURE_GROUPS with common tasks

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_eval(path: Path) -> tuple[Path, dict[str, Any]]:
    """The ``eval.json`` of a run directory (or the file itself) and its content; UserError when there is none."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"no such run directory: {path}", fix=FIX, exit_code=2)
    file = path / JSON_NAME if path.is_dir() else path
    if not file.is_file():
        raise UserError(f"{path} has no {JSON_NAME} (not a finished `forge eval` run)", fix=FIX, exit_code=2)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"cannot read {file}: {e}", fix=FIX, exit_code=2) from e
    if not isinstance(data, dict) or not isinstance(data.get("tasks"), list):
        raise UserError(f"{file} is not an eval.json written by `forge eval` (no task list)", fix=FIX, exit_code=2)
    return file, data


def _run_info(file: Path, data: Mapping[str, Any]) -> RunInfo:
    meta = data.get("meta") or {}
    return RunInfo(path=str(file.parent), run_id=str(meta.get("run_id", "")), harness=str(meta.get("harness", "")),
                   env=str(meta.get("env", "")), model=str(meta.get("model", "")),
                   trials_per_task=int(data.get("trials_per_task") or meta.get("trials") or 1),
                   tasks=len(data["tasks"]))


def _metric_fns(k: int) -> dict[str, Callable[[Mapping[str, Any]], float | None]]:
    """Each compared metric as a function of one task row of eval.json."""
    def at(kk: int, fn: Callable[[int, int, int], float]) -> Callable[[Mapping[str, Any]], float | None]:
        return lambda row: fn(int(row["n"]), int(row["passes"]), kk) if int(row["n"]) >= kk else None

    return {"mean score": lambda row: row.get("mean_score"), "pass@1": at(1, pass_at_k), f"pass^{k}": at(k, pass_hat_k)}


def _diff(a: float | None, b: float | None) -> MetricDiff:
    both = a is not None and b is not None
    return MetricDiff(a=a, b=b, delta=b - a if a is not None and b is not None else None, n=1 if both else 0)


def _group(name: str, tasks: Sequence[TaskDiff], names: Sequence[str]) -> GroupDiff:
    metrics = {}
    for m in names:
        pairs = [(d.a, d.b, t.cluster) for t in tasks if (d := t.metrics[m]).a is not None and d.b is not None]
        if not pairs:
            metrics[m] = MetricDiff(None, None, None)
            continue
        n = len(pairs)
        deltas = [b - a for a, b, _ in pairs]
        low, high = bootstrap_mean_ci(deltas, clusters=[c for _, _, c in pairs])
        metrics[m] = MetricDiff(sum(a for a, _, _ in pairs) / n, sum(b for _, b, _ in pairs) / n,
                                sum(deltas) / n, low, high, n)
    return GroupDiff(name=name, tasks=len(tasks), metrics=metrics)


def compare(run_a: Path, run_b: Path) -> Comparison:
    """B minus A, per common task, per category and overall (see the module docstring)."""
    (file_a, data_a), (file_b, data_b) = load_eval(run_a), load_eval(run_b)
    info_a, info_b = _run_info(file_a, data_a), _run_info(file_b, data_b)
    k = min(info_a.trials_per_task, info_b.trials_per_task)
    fns = _metric_fns(k)
    rows_a = {str(r["task_id"]): r for r in data_a["tasks"]}
    rows_b = {str(r["task_id"]): r for r in data_b["tasks"]}
    def kind(tid: str, key: str) -> Any:
        return rows_b[tid].get(key) if rows_b[tid].get(key) is not None else rows_a[tid].get(key)

    tasks = [TaskDiff(task_id=tid, category=str(rows_b[tid].get("category") or rows_a[tid].get("category") or ""),
                      metrics={m: _diff(fn(rows_a[tid]), fn(rows_b[tid])) for m, fn in fns.items()},
                      template=kind(tid, "template"), seen=kind(tid, "seen"), guided=kind(tid, "guided"))
             for tid in sorted(rows_a.keys() & rows_b.keys())]
    by_category: dict[str, list[TaskDiff]] = {}
    by_exposure: dict[str, list[TaskDiff]] = {}
    for t in tasks:
        by_category.setdefault(t.category, []).append(t)
        for group in exposure_groups(t.seen, t.guided):
            by_exposure.setdefault(group, []).append(t)
    names = list(fns)
    return Comparison(
        a=info_a, b=info_b, k=k, metric_names=names, overall=_group("overall", tasks, names),
        categories={c: _group(c, by_category[c], names) for c in sorted(by_category)}, tasks=tasks,
        only_a=sorted(rows_a.keys() - rows_b.keys()), only_b=sorted(rows_b.keys() - rows_a.keys()),
        exposure={g: _group(g, by_exposure[g], names) for g in EXPOSURE_GROUPS if g in by_exposure},
    )


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"


def _arrow(d: MetricDiff) -> str:
    return f"{fmt(d.a)} -> {fmt(d.b)}"


def _delta_ci(d: MetricDiff) -> str:
    return "-" if d.delta is None else f"{_signed(d.delta)} [{_signed(d.low)}, {_signed(d.high)}]"


def render_comparison(cmp: Comparison, console: Console) -> None:
    """The aggregates with their paired intervals, then the common tasks whose metrics changed, then the rest."""
    def run_line(label: str, r: RunInfo) -> str:
        return f"{label}: {r.path} ({r.run_id or '?'}: {r.harness} on {r.env}, {r.model}, K={r.trials_per_task})"

    console.print("\n".join([run_line("A", cmp.a), run_line("B", cmp.b)]), markup=False, highlight=False,
                  soft_wrap=True)
    names = cmp.metric_names
    headers = ["group", "tasks", *(h for m in names for h in (f"{m} A -> B", f"delta {m}"))]
    rows = [[g.name, str(g.tasks), *(c for m in names for c in (_arrow(g.metrics[m]), _delta_ci(g.metrics[m])))]
            for g in [cmp.overall, *cmp.exposure.values(), *cmp.categories.values()]]
    print_table(console, f"B minus A over {cmp.overall.tasks} common task(s)", headers, rows,
                "95% paired-bootstrap intervals over the common tasks' types (a template's tasks drawn together)")
    changed = [t for t in cmp.tasks if any(d.delta is not None and abs(d.delta) > 1e-9 for d in t.metrics.values())]
    if changed:
        headers = ["task", "category", *(h for m in names for h in (f"{m} A -> B", f"delta {m}"))]
        rows = [[t.task_id, t.category, *(c for m in names for c in (_arrow(t.metrics[m]),
                                                                      _signed(t.metrics[m].delta)))]
                for t in changed]
        print_table(console, f"{len(changed)} task(s) changed", headers, rows,
                    f"{len(cmp.tasks) - len(changed)} common task(s) unchanged", text_columns=2)
    for label, ids in (("only in A", cmp.only_a), ("only in B", cmp.only_b)):
        if ids:
            console.print(f"{len(ids)} task(s) {label}: {', '.join(ids)}", markup=False, highlight=False,
                          soft_wrap=True)
