"""``forge eval``: every selected task ``eval.trials`` times through the rollout session, then the reports.

Trials of a task are one group (sample index = trial). A trial that ends ``infra_error`` (sandbox, service or
verifier failure: never the agent's fault) is run again, up to ``eval.retries`` times, under a new rollout id;
only its last attempt counts. ``results.jsonl`` keeps every attempt as it ends, so an interrupted eval resumes
(``forge eval --resume RUN_DIR``) from the experiment saved in the run directory, running only the trials that
have no final result yet. The reports (``eval.json``, ``report.html``, the terminal table) come from
``forge_cli/eval/report.py``; pass@k and pass^k from ``forge_cli/eval/metrics.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from forge_cli.config.schema import Experiment
from forge_cli.envs.source import load_tasks
from forge_cli.envs.task import Task
from forge_cli.rollout.progress import RunProgress
from forge_cli.rollout.reader import read_results
from forge_cli.rollout.result import RolloutResult
from forge_cli.rollout.session import RolloutSession

Key = tuple[str, int]  # (task id, trial)


def _trial(result: RolloutResult, task: Task | None) -> dict[str, Any]:
    """One trial as the reports read it (``forge_cli/eval/metrics.py``); ``task`` gives its type, when known."""
    return {"task_id": result.task_id, "category": result.category or "all",
            "template": task.template if task else None, "seen": task.seen if task else None,
            "guided": task.guided if task else None, "trial": result.sample,
            "rollout_id": result.rollout_id, "status": result.status, "reward": result.reward,
            "passed": result.passed, "logs": result.logs, "calls": result.calls, "error": result.error,
            "duration_s": result.durations.get("total", 0.0), "attempt": result.step}


def run_eval(exp: Experiment, data: dict[str, Any], *, resume: Path | None = None, quiet: bool = False,
             on_run_dir: Callable[[Path], None] | None = None) -> Any:
    """Run (or resume) the eval and write its reports; returns the EvalReport."""
    from forge_cli.eval.report import write_reports

    taskset = load_tasks(exp.env, exp.rollout.max_tasks, purpose="eval")
    trials, retries = exp.eval.trials, exp.eval.retries
    final: dict[Key, RolloutResult] = {}
    attempts: dict[Key, int] = {}
    for result in read_results(resume) if resume else []:
        key = (result.task_id, result.sample)
        attempts[key] = attempts.get(key, 0) + 1
        final[key] = result
    sampling = {"temperature": exp.eval.temperature} if exp.eval.temperature is not None else None
    by_id = {t.id: t for t in taskset.tasks}
    todo = [(task, trial) for task in taskset.tasks for trial in range(trials)
            if (task.id, trial) not in final or final[(task.id, trial)].status == "infra_error"]
    started, started_at = time.monotonic(), time.strftime("%Y-%m-%d %H:%M:%S")
    progress = RunProgress(len(todo), quiet=quiet)
    session = RolloutSession(exp, data, taskset, progress.say, run_dir=resume,
                             sampling=sampling)
    if on_run_dir is not None:
        on_run_dir(session.run_dir)
    with progress, session:
        progress.say(f"eval: {len(taskset.tasks)} tasks x {trials} trials ({taskset.note}); "
                     + (f"{len(final)} trials already ended, " if resume else "")
                     + f"{len(todo)} to run, {exp.eval.concurrency or exp.rollout.concurrency} in flight"
                     + (f", temperature {exp.eval.temperature}" if sampling else ""))
        for _ in range(retries + 1):
            if not todo:
                break
            # a retried trial gets a new rollout id (its attempt number), the same group
            jobs = [session.job(task, trial, 0, attempt=attempts.get((task.id, trial), 0)) for task, trial in todo]
            for result in session.run(jobs, concurrency=exp.eval.concurrency, on_start=progress.started,
                                      on_result=progress.finished):
                key = (result.task_id, result.sample)
                attempts[key] = attempts.get(key, 0) + 1
                final[key] = result
            todo = [(by_id[k[0]], k[1]) for k, r in sorted(final.items()) if r.status == "infra_error"
                    and attempts[k] <= retries and k[0] in by_id]
            if todo:
                progress.say(f"retrying {len(todo)} trial(s) that ended in an infra error")
    meta = {"run_id": session.run_id, "run_dir": str(session.run_dir), "harness": exp.harness.name,
            "env": exp.env.name, "split": taskset.split, "model": _model_name(exp), "trials": trials,
            "temperature": exp.eval.temperature, "config": data, "started": started_at,
            "duration_s": round(time.monotonic() - started, 1)}
    rows = [_trial(final[(t.id, k)], t) for t in taskset.tasks for k in range(trials) if (t.id, k) in final]
    # a benchmark adapter's own headline, as the benchmark's tooling computes it (e.g. QwenClawBench)
    summarize = getattr(taskset.source, "benchmark_summary", None)
    if callable(summarize):
        meta["benchmark"] = summarize(rows, session.run_dir, trials)
    return write_reports(rows, meta, session.run_dir)


def _model_name(exp: Experiment) -> str:
    model = exp.model
    return str(getattr(model, "path", None) or getattr(model, "model", None) or getattr(model, "source", ""))
