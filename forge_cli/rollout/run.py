"""``forge rollout`` for real: tasks x samples through the harness, in sandboxes, via the proxy.

A run directory ``<run.output_dir>/<run id>/`` holds ``config.yaml`` (the composed experiment),
``traces.sqlite`` (every model call), ``results.jsonl`` (one RolloutResult per line, written as each
rollout ends), ``rollouts/<id>/`` (harness output and sandbox log) and ``summary.json``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import signal
import time
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

from forge_cli.config.schema import Experiment
from forge_cli.envs.registry import load_tasks
from forge_cli.errors import UserError
from forge_cli.harness.bundle_paths import binary_fix, is_installed
from forge_cli.rollout.plan import context_shortfall, rollout_id
from forge_cli.rollout.progress import RunProgress
from forge_cli.rollout.runner import RolloutJob, RunContext
from forge_cli.rollout.scheduler import ResultLog, run_all, summarise
from forge_cli.rollout.services import capture_proxy, policy_server, tool_server
from forge_cli.runtime.registry import cleanup


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C."""


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGTERM ends a run like Ctrl-C: sandboxes stopped, proxy and policy server shut down."""
    raise Terminated


def ensure_bundle(exp: Experiment) -> None:
    """forge's builtin harness is (re)installed from this checkout, a user-provided binary
    (``harness.binary_path``) installed unless the bundle already holds that file; others must be
    installed already."""
    from forge_cli.harness.bundles import install

    harness = exp.harness
    if harness.package.manager == "builtin":
        install(harness, force=True)
    elif harness.package.manager == "binary" and harness.binary_path:
        install(harness, binary_path=Path(harness.binary_path))
    elif harness.package.manager == "binary" and not is_installed(harness):
        raise UserError(f"harness '{harness.name}' is not installed: no package registry carries it",
                        fix=binary_fix(harness))
    elif not is_installed(harness):
        raise UserError(f"harness bundle '{harness.name}' is not installed",
                        fix=f"forge harness install {harness.name}")


def execute(exp: Experiment, data: dict[str, Any], *, quiet: bool = False) -> dict[str, Any]:
    """Run every rollout of the experiment; returns the run summary (also in summary.json)."""
    taskset = load_tasks(exp.env, exp.rollout.max_tasks)
    if not taskset.available:
        raise UserError(f"env '{exp.env.name}' has no tasks to run: {taskset.note}")
    ensure_bundle(exp)
    # the random tail keeps runs started in the same second apart: rollout ids, container names and the
    # cleanup label all derive from the run id
    run_id = f"{exp.run.name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    run_dir = Path(exp.run.output_dir).expanduser().resolve() / run_id
    run_dir.mkdir(parents=True, exist_ok=False)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    jobs = [RolloutJob(rollout_id(run_id, task.id, sample), task, sample)
            for task in taskset.tasks for sample in range(exp.rollout.samples_per_task)]
    progress = RunProgress(len(jobs), quiet=quiet)
    started = time.monotonic()
    log = ResultLog(run_dir / "results.jsonl")
    previous = signal.signal(signal.SIGTERM, _interrupt)
    # a shell's background job inherits SIGINT as ignored: Ctrl-C / kill -INT must still stop the run
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with progress, policy_server(exp, progress.say) as upstream, \
                capture_proxy(exp, upstream, run_dir / "traces.sqlite") as (proxy, endpoint), \
                tool_server(exp, any(t.tools for t in taskset.tasks), progress.say) as tools:
            progress.say(f"run {run_id}: {len(jobs)} rollouts ({len(taskset.tasks)} tasks x "
                         f"{exp.rollout.samples_per_task}), {exp.rollout.concurrency} in flight; proxy {proxy.url}")
            if (shortfall := context_shortfall(exp)) is not None:
                progress.say(f"warning: {shortfall}")
            ctx = RunContext(exp=exp, run_id=run_id, run_dir=run_dir, proxy=proxy, endpoint=endpoint, tools=tools)
            results = asyncio.run(run_all(ctx, jobs, exp.rollout.concurrency, log,
                                          on_start=progress.started, on_result=progress.finished))
    except KeyboardInterrupt as stop:
        how = "terminated (SIGTERM)" if isinstance(stop, Terminated) else "interrupted (Ctrl-C)"
        raise UserError(f"{how}; finished rollouts are in {run_dir / 'results.jsonl'}, every recorded call "
                        f"in {run_dir / 'traces.sqlite'}", exit_code=130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
        log.close()
        with contextlib.suppress(Exception):
            asyncio.run(cleanup(run_id, exp.runtime))
    summary = {"run_id": run_id, "run_dir": str(run_dir), "harness": exp.harness.name, "env": exp.env.name,
               "runtime": exp.runtime.kind, **summarise(results),
               "duration_s": round(time.monotonic() - started, 1)}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
