"""QwenClawBench's headline for a ``forge eval`` run, computed as its ``scripts/benchmark.py`` computes it.

Per task: the mean of its runs' scores (penalized scoring, their default); the headline ``mean_score`` is the mean
over tasks; ``pass@k`` / ``pass^k`` for k = 1..K come from the checkout's own ``lib_grading.pass_k_stats`` (a run
passes at score 1.0). Like their summary, a task counts once all K of its runs are graded: a task with a run that
was not judged (the judge missing or down) or that ended in an infra error is left out and listed with the reason,
never scored as a failure.

The run directory gets ``qwenclawbench/`` in their runner's batch layout: ``<task_id>[_run_N]/transcript.json``
(the session entries as a JSON list), ``grading.json`` (``GradeResult.to_dict()``), ``workspace/`` (the snapshot
graded), and ``summary.json`` with the headline, so their tooling can read or re-grade every trial.
"""

from __future__ import annotations

import json
import shutil
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _subfolder(task_id: str, run_idx: int, runs_per_task: int) -> str:
    """Their ``_subfolder_name``: ``task_id`` or ``task_id_run_N``."""
    return task_id if runs_per_task <= 1 else f"{task_id}_run_{run_idx + 1}"


def summarize(trials: list[dict[str, Any]], run_dir: Path, runs_per_task: int, *, dataset: str,
              passk: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """The batch directory in QwenClawBench's runner layout and its headline over ``trials``; ``passk`` computes
    the benchmark's own pass@k over the graded tasks (the source runs its worker), so this module imports nothing of
    its package."""

    batch = run_dir / "qwenclawbench"
    batch.mkdir(parents=True, exist_ok=True)
    by_task: dict[str, list[dict[str, Any]]] = {}
    for t in trials:
        by_task.setdefault(str(t["task_id"]), []).append(t)
    grades_by_task: dict[str, dict[str, Any]] = {}
    left_out: dict[str, str] = {}
    entries = []
    for task_id, runs in sorted(by_task.items()):
        grades = []
        for t in sorted(runs, key=lambda r: int(r.get("trial", 0))):
            kept = Path(str(t.get("logs") or "")) / "qwenclawbench"
            grading = _read(kept / "grading.json")
            dest = batch / _subfolder(task_id, int(t.get("trial", 0)), runs_per_task)
            if kept.is_dir():
                if dest.exists():
                    shutil.rmtree(dest)
                shutil.copytree(kept, dest, ignore=shutil.ignore_patterns("transcript.jsonl"))
            if t.get("status") == "infra_error":
                left_out[task_id] = f"infra error: {str(t.get('error') or '')[:200]}"
            elif grading is None or "score" not in grading:
                why = (grading or {}).get("not_judged") or t.get("error") or "not graded"
                left_out[task_id] = f"not judged: {why}"
            else:
                grades.append(grading)
        if task_id in left_out or len(grades) < runs_per_task:
            left_out.setdefault(task_id, f"{len(grades)} of {runs_per_task} runs graded")
            continue
        scores = [float(g["score"]) for g in grades]
        grades_by_task[task_id] = {"task_id": task_id, "runs": grades, "mean": statistics.mean(scores),
                                   "std": statistics.stdev(scores) if len(scores) > 1 else 0.0,
                                   "min": min(scores), "max": max(scores)}
        entries.append({"task_id": task_id, "grading": grades_by_task[task_id]})
    figures = passk(grades_by_task) if grades_by_task else {}
    means = [g["mean"] for g in grades_by_task.values()]
    summary = {"benchmark": "QwenClawBench", "dataset": dataset, "runs_per_task": runs_per_task,
               "tasks_total": len(by_task), "tasks_completed": len(grades_by_task), "scoring": "penalized",
               "mean_score": round(statistics.mean(means), 4) if means else None, **figures,
               "left_out": left_out, "tasks": entries}
    (batch / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False), encoding="utf-8")
    return {"name": "QwenClawBench", "summary": {k: v for k, v in summary.items() if k != "tasks"},
            "dir": str(batch), "lines": _lines(summary, batch)}


def _lines(s: dict[str, Any], batch: Path) -> list[str]:
    k = s["runs_per_task"]
    ks = sorted({1, k})
    if s["mean_score"] is None:
        head = "QwenClawBench (lib_grading): no task has all its runs graded"
    else:
        pk = ", ".join(f"pass@{i} {s.get(f'pass@{i}', 0):.4f}, pass^{i} {s.get(f'pass^{i}', 0):.4f}" for i in ks)
        head = (f"QwenClawBench (lib_grading, penalized scoring): mean score {s['mean_score']:.4f}; {pk} "
                f"over {s['tasks_completed']} task(s) x {k} run(s)")
    lines = [head]
    for task_id, why in sorted(s["left_out"].items()):
        lines.append(f"  left out {task_id}: {why}")
    lines.append(f"  transcripts, gradings and workspaces in QwenClawBench's layout: {batch}")
    return lines


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None
