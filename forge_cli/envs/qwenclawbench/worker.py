"""QwenClawBench's own code, run in a child process (its grade functions execute what the agent wrote).

``python worker.py load CHECKOUT DATASET``: every task as ``scripts/lib_tasks.py``'s ``TaskLoader`` parses it (JSON on
stdout). ``python worker.py grade`` (a JSON request on stdin): one trial graded with ``scripts/lib_grading.py``'s own
functions, exactly as its ``grade_task`` composes them (``_grade_automated``; ``_grade_llm_judge``;
``_combine_grades`` for hybrid tasks), with three changes that keep a run bounded and honest: the judge is only the
endpoint forge was given (``JUDGE_BASE_URL``/``JUDGE_API_KEY`` for this process; the checkout's
``openclaw_config/.env`` is not read), its retries are ``judge.retries`` instead of 100, and the fallback to an
OpenClaw judge agent is replaced by "not judged". A hybrid trial whose automated score is below
``AUTO_PENALTY_THRESHOLD`` needs no judge (``_combine_grades`` zeroes the judge's part), so it is scored without
one. ``python worker.py passk`` (stdin: ``{"grades_by_task", "runs_per_task"}``): ``pass_k_stats``.

Stdlib only besides the checkout's own imports (PyYAML for ``lib_tasks``).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback
from pathlib import Path
from typing import Any


class NotJudged(Exception):
    """The judge could not be asked (not configured) or did not answer."""


def _import(checkout: str) -> tuple[Any, Any]:
    sys.path.insert(0, str(Path(checkout) / "scripts"))
    import lib_grading
    import lib_tasks

    return lib_tasks, lib_grading


def load(checkout: str, dataset: str) -> list[dict[str, Any]]:
    lib_tasks, _ = _import(checkout)
    loader = lib_tasks.TaskLoader(Path(checkout) / "data" / dataset / "tasks")
    out = []
    for path in sorted(loader.tasks_dir.glob("task_*.md")):
        try:
            task = loader.load_task(path)
        except Exception as exc:  # one unreadable task file: named, the others still load
            out.append({"file": path.name, "error": f"{type(exc).__name__}: {exc}"})
            continue
        out.append({**task.to_dict(), "file": path.name, "automated": task.automated_checks is not None})
    return out


def grade(req: dict[str, Any]) -> dict[str, Any]:
    lib_tasks, lib_grading = _import(req["checkout"])
    task = lib_tasks.TaskLoader(Path(req["tasks_dir"])).load_task(Path(req["task_file"]))
    transcript = json.loads(Path(req["transcript"]).read_text(encoding="utf-8"))
    execution = {"status": req.get("status", "success"), "transcript": transcript, "workspace": req["workspace"]}
    judge = req.get("judge") or {}
    last_error: list[str] = []
    lib_grading._load_openclaw_env = lambda *a, **k: {}
    lib_grading.JUDGE_API_MAX_RETRIES = max(1, int(judge.get("retries", 3)))
    lib_grading.JUDGE_API_RETRY_BASE_SECONDS = float(judge.get("retry_base_s", 2.0))
    call_api = lib_grading._call_llm_judge_api

    def recorded_call(*args: Any, **kwargs: Any) -> str:
        try:
            return str(call_api(*args, **kwargs))
        except Exception as exc:
            last_error[:] = [f"{type(exc).__name__}: {exc}"[:500]]
            raise

    def no_agent_fallback(*args: Any, **kwargs: Any) -> str:
        raise NotJudged(f"the judge at {judge.get('base_url')} did not answer after "
                        f"{lib_grading.JUDGE_API_MAX_RETRIES} attempt(s): {last_error[0] if last_error else '?'}")

    lib_grading._call_llm_judge_api = recorded_call
    lib_grading._ensure_judge_agent = no_agent_fallback
    for key in ("JUDGE_BASE_URL", "JUDGE_API_KEY"):
        os.environ.pop(key, None)
    if judge.get("base_url"):
        os.environ["JUDGE_BASE_URL"] = str(judge["base_url"])
        os.environ["JUDGE_API_KEY"] = str(judge.get("api_key") or "EMPTY")

    def ask_judge() -> Any:
        if not judge.get("base_url"):
            raise NotJudged("no judge endpoint is configured (eval.judge.base_url, or JUDGE_BASE_URL)")
        return lib_grading._grade_llm_judge(
            task=task, execution_result=execution, judge_model=judge.get("model") or lib_grading.DEFAULT_JUDGE_MODEL,
            judge_agent_prefix=lib_grading.DEFAULT_JUDGE_AGENT_PREFIX,
            judge_timeout_seconds=float(judge.get("timeout_s", 120)), skill_dir=Path(req["checkout"]))

    kind = task.grading_type
    out: dict[str, Any] = {"task_id": task.task_id, "grading_type": kind, "judged": kind == "automated"}
    if kind == "automated":
        result = lib_grading._grade_automated(task, execution)
    elif kind == "llm_judge":
        try:
            result = ask_judge()
            out["judged"] = True
        except NotJudged as exc:
            return {**out, "not_judged": str(exc)}
    elif kind == "hybrid":
        auto = lib_grading._grade_automated(task, execution)
        out["automated"] = auto.to_dict()
        try:
            llm = ask_judge()
            out["judged"] = True
        except NotJudged as exc:
            if auto.score >= lib_grading.AUTO_PENALTY_THRESHOLD:
                return {**out, "not_judged": str(exc)}
            # below the threshold the judge's part is zeroed whatever it says: the score is exact without it
            llm = lib_grading.GradeResult(task_id=task.task_id, score=0.0, max_score=1.0, grading_type="llm_judge",
                                          breakdown={}, notes="")
            out["judge_not_needed"] = (f"automated score {auto.score:.4f} < {lib_grading.AUTO_PENALTY_THRESHOLD}: "
                                       f"the judge's part counts 0 ({exc})")
        result = lib_grading._combine_grades(task, auto, llm)
        if not out["judged"]:
            result.score_simple = None  # the unpenalized mix needs the judge's score
    else:
        raise ValueError(f"Unknown grading type: {kind}")
    return {**out, "grade": result.to_dict()}


def passk(req: dict[str, Any]) -> dict[str, Any]:
    _, lib_grading = _import(req["checkout"])
    return dict(lib_grading.pass_k_stats(req["grades_by_task"], int(req["runs_per_task"])))


def main() -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    try:
        if mode == "load":
            result: Any = load(sys.argv[2], sys.argv[3])
        elif mode in ("grade", "passk"):
            req = json.loads(sys.stdin.read())
            result = grade(req) if mode == "grade" else passk(req)
        else:
            print(f"usage: worker.py load CHECKOUT DATASET | grade | passk (got {mode!r})", file=sys.stderr)
            return 2
    except Exception:
        traceback.print_exc()
        return 1
    sys.stdout.flush()
    print("\n@@QCB-RESULT@@" + json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
