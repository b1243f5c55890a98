"""Claw-Eval's headline for a ``forge eval`` run, counted as its ``cli.py`` ``cmd_batch`` / ``score_summary.py`` do.

Per task: its trials' task scores, an errored trial counting as 0 (their summary pads missing or errored trials
with 0); ``pass@k``: any trial passes (score >= 0.75), ``pass^k``: all do; the mean score is the mean over tasks
of the mean trial score. forge retries infra errors first (``eval.retries``); the headline is given both as
Claw-Eval counts (a trial still errored is a failure) and over graded trials only. Trials that were not judged
(judge down) and tasks left out (not gradable, unsupported) are listed with the reason, never scored.

The run directory gets ``claweval/traces/<model>/<run id>/<task>_<8 hex>.jsonl``: every final trial's trace with
its ``grading_result``, the layout ``python score_summary.py <run>/claweval/traces`` re-scores.
"""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

PASS = 0.75


def _headline(tasks: dict[str, list[float | None]], k: int) -> dict[str, Any]:
    counted = {t: [s or 0.0 for s in scores] + [0.0] * max(0, k - len(scores)) for t, scores in tasks.items()}
    graded = {t: [s for s in scores if s is not None] for t, scores in tasks.items()}
    graded = {t: s for t, s in graded.items() if s}
    n = len(counted)

    def rates(by: dict[str, list[float]]) -> dict[str, Any]:
        m = len(by)
        return {"tasks": m,
                "mean_score": round(sum(sum(s) / len(s) for s in by.values()) / m, 4) if m else None,
                f"pass@{k}": round(sum(any(x >= PASS for x in s) for s in by.values()) / m, 4) if m else None,
                f"pass^{k}": round(sum(all(x >= PASS for x in s) for s in by.values()) / m, 4) if m else None}

    return {"as_claweval": rates(counted), "graded_only": rates(graded), "tasks": n}


def summarize(trials: list[dict[str, Any]], run_dir: Path, k: int, *, splits: Mapping[str, str],
              left_out: dict[str, str]) -> dict[str, Any]:
    """The headline over ``trials`` (``splits``: a task id's first letter -> its group; ``left_out``: the split's
    tasks the source could not run, with why) and the traces in ``run_dir``; the source hands both over, so this
    module imports nothing of its package."""

    out = run_dir / "claweval" / "traces"
    by_group: dict[str, dict[str, list[float | None]]] = defaultdict(lambda: defaultdict(list))
    not_judged: dict[str, str] = {}
    model = "model"
    for t in trials:
        task_id = str(t["task_id"])
        result = _result(t)
        if result is not None and result.get("not_judged"):
            not_judged[task_id] = str(result["not_judged"])
            continue
        trace = Path(str(result.get("trace"))) if result else None
        if trace is not None and trace.exists():
            model = _model(trace) or model
            dest = out / model.replace("/", "_") / run_dir.name
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy2(trace, dest / trace.name)
        score = float(t["reward"]) if t.get("status") != "infra_error" and t.get("reward") is not None else None
        split = splits.get(task_id[:1], "general")
        for group in ("all", f"split:{split}", f"category:{t.get('category') or 'all'}"):
            by_group[group][task_id].append(score)
    for tasks_of in by_group.values():
        for judged_out in not_judged:
            tasks_of.pop(judged_out, None)
    summary = {name: _headline(tasks, k) for name, tasks in sorted(by_group.items())}
    lines = [f"Claw-Eval headline ({k} trial(s) per task; pass = task score >= {PASS}; errored trials count as 0 "
             "as Claw-Eval counts them):"]
    for name, h in summary.items():
        a, g = h["as_claweval"], h["graded_only"]
        lines.append(f"  {name:<28} tasks {a['tasks']:>3}  mean {_f(a['mean_score'])}  pass@{k} {_f(a[f'pass@{k}'])}"
                     f"  pass^{k} {_f(a[f'pass^{k}'])}   (graded only: mean {_f(g['mean_score'])}, "
                     f"{g['tasks']} task(s))")
    if not_judged:
        lines.append(f"  not judged ({len(not_judged)}, left out): "
                     + "; ".join(f"{t}: {w[:120]}" for t, w in sorted(not_judged.items())[:5]))
    if left_out:
        reasons: dict[str, int] = defaultdict(int)
        for why in left_out.values():
            reasons[why.split(":")[0]] += 1
        lines.append(f"  left out ({len(left_out)} task(s) of the split): "
                     + "; ".join(f"{n} {w}" for w, n in sorted(reasons.items())))
    lines.append(f"  traces: {out} (python score_summary.py {out})")
    return {"benchmark": "Claw-Eval", "groups": summary, "not_judged": not_judged, "left_out": left_out,
            "traces": str(out), "lines": lines}


def _f(value: float | None) -> str:
    return "  -  " if value is None else f"{value:.3f}"


def _result(trial: dict[str, Any]) -> dict[str, Any] | None:
    logs = Path(str(trial.get("logs") or ""))
    verifier = logs / "result.json"
    details: dict[str, Any] = {}
    if verifier.exists():
        details = (json.loads(verifier.read_text()).get("verifier") or {}).get("details") or {}
    if not details:
        found = sorted((logs / "claweval").glob("*.jsonl")) if (logs / "claweval").is_dir() else []
        if found:
            details = {"trace": str(found[-1])}
        if "not judged" in str(trial.get("error") or ""):
            details["not_judged"] = str(trial["error"]).removeprefix("not judged: ")
    return details or None


def _model(trace: Path) -> str | None:
    with trace.open(encoding="utf-8") as f:
        first = json.loads(f.readline() or "{}")
    return str(first.get("model") or "") or None
