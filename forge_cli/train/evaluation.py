"""Periodic evaluation inside ``forge train`` (``trainer.eval_every``): the eval split through the run's own session.

After every ``trainer.eval_every``-th step (and after the last one), with that step's weights served, each task of
the eval split (``trainer.eval_split``, else the env's validation split: ``val`` for builtin; at most
``trainer.eval_max_tasks``) runs ``eval.trials`` times through the same harness, sandboxes, proxy and policy server
as training. The proxy enforces ``eval.temperature`` on these rollouts only (a per-rollout ``sampling`` at their
registration, over the run's ``rollout.sampling``); training rollouts keep the run's.

Evaluation rollouts are never trained on: their results go to ``eval/step-N/results.jsonl`` (never to the run's
``results.jsonl``, which the trainer, ``forge samples export`` and the merge report read), with ``eval.json`` and
``report.html`` beside it (``forge eval``'s reports). Their rollout and group ids carry an ``eval`` tag and the run's
incarnation, so they collide neither with training rollouts nor with an interrupted attempt's. The pass rate and
mean score are ``forge eval``'s (``forge_cli/eval/metrics.py``: infra errors left out of the counts).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from forge_cli.config.schema import Experiment
from forge_cli.envs.source import TaskSet, load_tasks
from forge_cli.envs.task import Task
from forge_cli.rollout.result import RolloutResult
from forge_cli.rollout.runner import RolloutJob
from forge_cli.rollout.session import RolloutSession
from forge_cli.train.dynamic import tagged_job

Say = Callable[[str], None]


def eval_due(step: int, every: int, steps: int) -> bool:
    """Is the evaluation run once ``step`` steps are done? Every ``every`` steps and after the last (0: never)."""
    return every > 0 and step > 0 and (step % every == 0 or step == steps)


def eval_taskset(exp: Experiment, train: TaskSet) -> TaskSet | None:
    """The tasks evaluated (None when ``trainer.eval_every`` is 0). ``env.task_ids`` and ``env.max_tasks`` choose
    training tasks: they apply here only when the evaluation runs on the training split."""
    if exp.trainer.eval_every == 0:
        return None
    env = exp.env.model_copy(update={"split": exp.trainer.eval_split, "task_ids": None, "max_tasks": None})
    taskset = load_tasks(env, exp.trainer.eval_max_tasks, purpose="validate")
    if taskset.split == train.split and (exp.env.task_ids is not None or exp.env.max_tasks is not None):
        env = env.model_copy(update={"task_ids": exp.env.task_ids, "max_tasks": exp.env.max_tasks})
        taskset = load_tasks(env, exp.trainer.eval_max_tasks, purpose="validate")
    return taskset


def eval_jobs(exp: Experiment, taskset: TaskSet, step: int, run_id: str, incarnation: int) -> list[RolloutJob]:
    """``eval.trials`` rollouts of every eval task after step ``step`` (trial = sample index), at eval.temperature."""
    sampling = {"temperature": exp.eval.temperature} if exp.eval.temperature is not None else None
    return [tagged_job(run_id, incarnation, task, trial, step, "eval", sampling)
            for task in taskset.tasks for trial in range(exp.eval.trials)]


def eval_metrics(results: list[RolloutResult], trials: int, out_dir: Path | None = None,
                 meta: dict[str, Any] | None = None, tasks: Sequence[Task] = ()) -> dict[str, Any]:
    """``eval_pass_rate`` / ``eval_mean_score`` (None when no trial counted), counts; the reports in ``out_dir``
    (with the held-out view where ``tasks`` say which were seen)."""
    from forge_cli.eval.report import build_report, write_reports
    from forge_cli.eval.run import _trial

    by_id = {task.id: task for task in tasks}
    rows = [_trial(r, by_id.get(r.task_id)) for r in results]
    info = {"trials": trials, **(meta or {})}
    report = write_reports(rows, info, out_dir) if out_dir is not None else build_report(rows, info, Path("."))
    overall = report.metrics.overall
    return {"eval_pass_rate": overall.pass_rate.value, "eval_mean_score": overall.mean_score.value,
            "eval_tasks": float(overall.tasks), "eval_trials": float(overall.trials),
            "eval_infra_errors": float(overall.infra_errors)}


def run_evaluation(session: RolloutSession, exp: Experiment, taskset: TaskSet, step: int, say: Say) -> dict[str, Any]:
    """Evaluate the weights served after step ``step`` (see the module docstring); the step's eval metrics."""
    import time

    from forge_cli.rollout.scheduler import ResultLog, run_all

    if session.ctx is None:
        raise RuntimeError("run_evaluation outside the session's `with` block")
    out_dir = session.run_dir / "eval" / f"step-{step}"
    out_dir.mkdir(parents=True, exist_ok=True)
    jobs = eval_jobs(exp, taskset, step, session.run_id, session.incarnation)
    temperature = exp.eval.temperature
    say(f"step {step}: evaluating {len(taskset.tasks)} task(s) of split '{taskset.split}' x {exp.eval.trials} "
        f"trial(s)" + (f" at temperature {temperature:g}" if temperature is not None else ""))
    started = time.monotonic()

    def line(result: RolloutResult, done: int, total: int) -> None:
        reward = "-" if result.reward is None else f"{result.reward:g}"
        say(f"step {step} eval: {done}/{total} {result.task_id}: {result.status} reward {reward}")

    # an attempt cut off by a crash is run again whole (under new rollout ids): its partial results go
    (out_dir / "results.jsonl").unlink(missing_ok=True)
    log = ResultLog(out_dir / "results.jsonl")
    try:
        results = asyncio.run(run_all(session.ctx, jobs, exp.eval.concurrency or exp.rollout.concurrency, log,
                                      on_result=line))
    finally:
        log.close()
    meta = {"run_id": session.run_id, "step": step, "split": taskset.split, "harness": exp.harness.name,
            "env": exp.env.name, "temperature": temperature}
    return {**eval_metrics(results, exp.eval.trials, out_dir, meta, taskset.tasks),
            "eval_s": time.monotonic() - started}
