"""Grades one Claw-Eval trace with the checkout's own code; run in forge's Claw-Eval environment (not forge's).

``python worker.py grade CHECKOUT TASK_DIR TRACE`` (the judge as JSON in ``$FORGE_CLAWEVAL_JUDGE``): the
checkout's ``src/`` goes first on ``sys.path``
(its graders import ``claw_eval`` and find peer graders relative to it), then exactly what Claw-Eval's runner
does after a trial (``cli.py`` ``_run_single_task``): ``TaskDefinition.from_yaml``, ``trace.reader.load_trace``,
``graders.registry.get_grader``, ``grade(...)`` with the optional parameters the grader accepts,
``models.scoring.compute_task_score`` / ``is_pass``, and a ``grading_result`` event appended to the trace.
The judge is ``graders.llm_judge.LLMJudge`` on the configured endpoint, or None. The result is printed as JSON
after a marker line; a grader that raises exits 1 with its traceback on stderr.
"""

from __future__ import annotations

import base64
import inspect
import json
import os
import sys
from pathlib import Path
from typing import Any

MARKER = "@@CLAWEVAL-RESULT@@"


def grade(checkout: Path, task_dir: Path, trace: Path, judge_cfg: dict[str, Any]) -> dict[str, Any]:
    sys.path.insert(0, str(checkout / "src"))
    from claw_eval.graders.registry import get_grader
    from claw_eval.models.scoring import compute_task_score, is_pass
    from claw_eval.models.task import TaskDefinition
    from claw_eval.models.trace import DimensionScores, GradingResult
    from claw_eval.trace.reader import load_trace

    task = TaskDefinition.from_yaml(task_dir / "task.yaml")
    start, messages, dispatches, media_events, _end, audit_data = load_trace(trace)
    judge: Any = None
    if judge_cfg.get("base_url"):
        from claw_eval.graders.llm_judge import LLMJudge

        judge = LLMJudge(model_id=judge_cfg.get("model") or "", api_key=judge_cfg.get("api_key") or "EMPTY",
                         base_url=judge_cfg["base_url"])
    env_snapshot: dict[str, Any] | None = None
    if task.local_grader_files:  # as _run_single_task reads them from the host
        env_snapshot = {}
        for rel in task.local_grader_files:
            local = task_dir / rel
            env_snapshot[f"local_file:{rel}"] = (
                {"encoding": "base64", "content": base64.b64encode(local.read_bytes()).decode()}
                if local.exists() else {"error": f"not found: {local}"})
    grader = get_grader(task.task_id, tasks_dir=task_dir.parent, task_dir=task_dir)
    if hasattr(judge, "reset_call_log"):
        judge.reset_call_log()
    params = inspect.signature(grader.grade).parameters
    kwargs: dict[str, Any] = {"audit_data": audit_data, "judge": judge}
    if "media_events" in params:
        kwargs["media_events"] = media_events
    if "env_snapshot" in params and env_snapshot is not None:
        kwargs["env_snapshot"] = env_snapshot
    scores = grader.grade(messages, dispatches, task, **kwargs)
    judge_calls = judge.get_call_log() if hasattr(judge, "get_call_log") else []
    task_score = compute_task_score(scores)
    passed = is_pass(task_score)
    event = GradingResult(trace_id=start.trace_id, task_id=task.task_id,
                          scores=DimensionScores(completion=scores.completion, robustness=scores.robustness,
                                                 communication=scores.communication, safety=scores.safety),
                          task_score=task_score, passed=passed, judge_calls=judge_calls or [])
    with open(trace, "a") as fh:
        fh.write(event.model_dump_json() + "\n")
    return {"task_id": task.task_id, "task_score": task_score, "passed": passed,
            "scores": {"completion": scores.completion, "robustness": scores.robustness,
                       "communication": scores.communication, "safety": scores.safety},
            "judge_calls": len(judge_calls or [])}


def main(argv: list[str]) -> int:
    if len(argv) != 5 or argv[1] != "grade":
        print("usage: worker.py grade CHECKOUT TASK_DIR TRACE", file=sys.stderr)
        return 2
    judge = json.loads(os.environ.get("FORGE_CLAWEVAL_JUDGE") or "{}")
    result = grade(Path(argv[2]), Path(argv[3]), Path(argv[4]), judge)
    print(MARKER)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
