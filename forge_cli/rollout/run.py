"""``forge rollout`` for real: every selected task x ``rollout.samples_per_task`` through one rollout session.

The run directory is described in ``forge_cli/rollout/session.py``; this adds ``summary.json``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from forge_cli.config.schema import Experiment
from forge_cli.envs.source import load_tasks
from forge_cli.rollout.progress import RunProgress
from forge_cli.rollout.scheduler import summarise
from forge_cli.rollout.session import RolloutSession


def execute(exp: Experiment, data: dict[str, Any], *, quiet: bool = False,
            on_run_dir: Callable[[Path], None] | None = None) -> dict[str, Any]:
    """Run every rollout of the experiment; returns the run summary (also in summary.json)."""
    taskset = load_tasks(exp.env, exp.rollout.max_tasks, purpose="rollout")
    samples = exp.rollout.samples_per_task
    progress = RunProgress(len(taskset.tasks) * samples, quiet=quiet)
    started = time.monotonic()
    session = RolloutSession(exp, data, taskset, progress.say)
    if on_run_dir is not None:
        on_run_dir(session.run_dir)
    with progress, session:
        jobs = session.jobs(taskset.tasks, samples)
        progress.say(f"{len(jobs)} rollouts ({len(taskset.tasks)} tasks x {samples}, {taskset.note}), "
                     f"{exp.rollout.concurrency} in flight")
        results = session.run(jobs, on_start=progress.started, on_result=progress.finished)
    summary = {"run_id": session.run_id, "run_dir": str(session.run_dir), "harness": exp.harness.name,
               "env": exp.env.name, "split": taskset.split, "runtime": exp.runtime.kind, **summarise(results),
               "duration_s": round(time.monotonic() - started, 1)}
    (session.run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
