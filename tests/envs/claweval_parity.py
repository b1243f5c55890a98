"""Grader parity: re-grade the traces a ``forge eval +env=claweval`` run saved with Claw-Eval's own runner code.

``<claweval venv python> claweval_parity.py CHECKOUT RUN_DIR``: for each saved trace (``<run>/claweval/traces``),
drop forge's ``grading_result``, grade it as Claw-Eval's ``cli.py`` does after a trial
(``_grade_with_optional_params``, ``compute_task_score``, ``is_pass``, ``_append_grading_to_trace``) into
``<run>/claweval/parity/<model>/<run>/``, run the checkout's ``score_summary.py`` on both directories, and print
per-task mean scores side by side (exit 1 on any difference).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def main(checkout: Path, run_dir: Path) -> int:
    sys.path.insert(0, str(checkout / "src"))
    from claw_eval.cli import _append_grading_to_trace, _grade_with_optional_params
    from claw_eval.graders.registry import get_grader
    from claw_eval.models.scoring import compute_task_score, is_pass
    from claw_eval.models.task import TaskDefinition
    from claw_eval.trace.reader import load_trace

    ours = run_dir / "claweval" / "traces"
    theirs = run_dir / "claweval" / "parity"
    for trace in sorted(ours.rglob("*.jsonl")):
        dest = theirs / trace.relative_to(ours)
        dest.parent.mkdir(parents=True, exist_ok=True)
        lines = [ln for ln in trace.read_text().splitlines() if '"grading_result"' not in ln]
        dest.write_text("\n".join(lines) + "\n")
        start, messages, dispatches, media, _end, audit = load_trace(dest)
        task_dir = checkout / "tasks" / start.task_id
        task = TaskDefinition.from_yaml(task_dir / "task.yaml")
        grader = get_grader(task.task_id, tasks_dir=checkout / "tasks", task_dir=task_dir)
        scores, calls = _grade_with_optional_params(grader, messages, dispatches, task, audit_data=audit,
                                                    judge=None, media_events=media)
        score = compute_task_score(scores)
        _append_grading_to_trace(dest, start.trace_id, task.task_id, scores, score, is_pass(score), calls)
    summaries = {}
    for name, root in (("forge", ours), ("claw-eval", theirs)):
        subprocess.run([sys.executable, str(checkout / "score_summary.py"), str(root)], check=True,
                       capture_output=True, text=True)
        summaries[name] = json.loads((root / "score_summary.json").read_text())[0]
    differ = 0
    print(f"{'task':<42} {'forge scores':<24} {'claw-eval scores':<24} equal")
    for task_id, t in sorted(summaries["forge"]["tasks"].items()):
        other = summaries["claw-eval"]["tasks"].get(task_id, {})
        equal = t["scores"] == other.get("scores")
        differ += not equal
        print(f"{task_id:<42} {'/'.join(f'{s:.4f}' for s in t['scores']):<24} "
              f"{'/'.join(f'{s:.4f}' for s in other.get('scores', [])):<24} {equal}")
    for name, s in summaries.items():
        print(f"{name}: score_summary avg {s['overall_avg_score']:.4f}, any-pass {s['n_any_pass']}/{s['n_tasks']}, "
              f"all-pass {s['n_all_pass']}/{s['n_tasks']}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
