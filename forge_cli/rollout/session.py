"""A rollout session: the services a run needs, started once, and batches of rollouts run through them.

``forge rollout``, ``forge eval`` and ``forge train`` all run rollouts the same way::

    with RolloutSession(exp, data, taskset, say) as session:
        jobs = session.jobs(tasks, samples=4, step=0)      # one group per task, ids unique per batch
        results = session.run(jobs, on_result=...)         # appended to results.jsonl as each ends
        ...                                                # more batches (training steps, eval retries)

Entering the session checks the harness bundle, runs the task source's one-off work (per-task images),
creates (or, on resume, reopens) the run directory, and starts the policy server (unless one is given), the
capture proxy recording into ``traces.sqlite``, the tool server when a task has tools, and the env's run-wide
services. Leaving it stops them all and removes every sandbox the run left behind. Signal handling belongs to
the command (``forge_cli/cli/signals.py``); a KeyboardInterrupt raised inside a batch unwinds the session.

A run directory holds ``config.yaml`` (the composed experiment), ``traces.sqlite`` (every model call),
``results.jsonl`` (one RolloutResult per line, synced as each rollout ends), ``rollouts/<id>/`` (harness output,
sandbox log, verifier log, service logs).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from forge_cli.config.schema import Experiment
from forge_cli.envs.services import Services
from forge_cli.envs.source import TaskSet
from forge_cli.envs.task import Task
from forge_cli.errors import UserError
from forge_cli.harness.bundle_paths import binary_fix, is_installed
from forge_cli.rollout import manifest
from forge_cli.rollout.plan import fit_context
from forge_cli.rollout.result import RolloutResult
from forge_cli.rollout.runner import RolloutJob, RunContext
from forge_cli.rollout.scheduler import OnResult, ResultLog, run_all
from forge_cli.rollout.services import capture_proxy, check_proxy_port, policy_server, tool_server
from forge_cli.rollout.spec import group_id, rollout_id
from forge_cli.runtime.base import Sandbox
from forge_cli.runtime.registry import backend

Say = Callable[[str], None]


def new_run_id(exp: Experiment) -> str:
    # the random tail keeps runs started in the same second apart: rollout ids, container names and the cleanup
    # label all derive from the run id
    return f"{exp.run.name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def ensure_bundle(exp: Experiment) -> None:
    """A harness that ships with forge (its builtin agent) is (re)installed from this checkout, a user-provided binary
    (``harness.binary_path``) installed unless the bundle already holds that file; others must be installed."""
    from forge_cli.harness.bundles import install
    from forge_cli.harness.installer import installer_for

    harness = exp.harness
    installer = installer_for(harness)
    if installer.ships_with_forge:
        install(harness, force=True)
    elif installer.user_provided and harness.binary_path:
        install(harness, binary_path=Path(harness.binary_path))
    elif installer.user_provided and not is_installed(harness):
        raise UserError(f"harness '{harness.name}' is not installed: no package registry carries it",
                        fix=binary_fix(harness))
    elif not is_installed(harness):
        raise UserError(f"harness bundle '{harness.name}' is not installed",
                        fix=f"forge harness install {harness.name}")


class RolloutSession:
    """Policy server, proxy, tool server, services and sandboxes for one run; batches run with :meth:`run`."""

    def __init__(self, exp: Experiment, data: dict[str, Any], taskset: TaskSet, say: Say, *,
                 run_dir: Path | None = None, sampling: dict[str, Any] | None = None,
                 relay: Callable[[str], contextlib.AbstractContextManager[Any]] | None = None) -> None:
        self.exp = exp
        self.data = data
        self.taskset = taskset
        self.say = say
        self.resumed = run_dir is not None
        # the run's sampling (rollout.sampling), with the caller's overrides (eval.temperature)
        self.sampling = {**exp.rollout.sampling.overrides(), **(sampling or {})}
        if run_dir is None:
            self.run_id = new_run_id(exp)
            self.run_dir = Path(exp.run.output_dir).expanduser().resolve() / self.run_id
        else:
            self.run_dir = run_dir.resolve()
            self.run_id = self.run_dir.name
        self._stack = contextlib.ExitStack()
        self.ctx: RunContext | None = None
        # the sandbox backend of exp.runtime.kind (looked up when the session starts)
        self.sandbox_class: type[Sandbox] | None = None
        # the policy server's URL once the session started
        self.upstream = ""
        # 0 for a new run, then one more per resume (part of every rollout id)
        self.incarnation = 0
        self.log: ResultLog | None = None
        # a server to put between the proxy and the policy server, made from the policy server's URL (a replay
        # upstream: forge_cli/replay/server.py); the proxy sends it every call, naming the call's rollout, and
        # ``relay_server`` is it once the session started (its ``url``)
        self.relay = relay
        self.relay_server: Any = None

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> RolloutSession:
        # a harness whose own first prompt cannot fit is refused before anything starts (or the context raised)
        self.exp, context_note = fit_context(self.exp)
        if context_note is not None:
            self.say(context_note)
        exp = self.exp
        check_proxy_port(exp)  # before the policy server's minute of start-up, not after it
        # the sandbox backend, looked up once for the run (its rollouts get it through the run's context)
        sandbox_class = self.sandbox_class = backend(exp.runtime.kind)
        sandbox_class.check_proxy(exp.runtime, exp.proxy.url)
        ensure_bundle(exp)
        # e.g. local sandboxes without isolation: printed on stderr now, kept in the run directory below
        warnings = sandbox_class.preflight(exp.runtime, self.run_id)
        self.taskset.source.build(self.taskset.tasks, exp.runtime.kind, self.say)
        if self.resumed:
            if not (self.run_dir / "config.yaml").is_file():
                raise UserError(f"{self.run_dir} is not a forge run directory (no config.yaml)", exit_code=2)
            marker = self.run_dir / "incarnation"
            self.incarnation = int(marker.read_text() or 0) + 1 if marker.is_file() else 1
            marker.write_text(str(self.incarnation))
            # sandboxes the interrupted attempt left behind
            self._cleanup_sandboxes()
            # what ran before against what runs now (forge, environments, harness, model, seeds)
            changed = manifest.differences(manifest.read(self.run_dir), manifest.build(exp, self.data))
            if changed:
                self.say("warning: this run continues with something else than it started with ("
                         + "; ".join(changed) + ")")
        else:
            self.run_dir.mkdir(parents=True, exist_ok=False)
            (self.run_dir / "config.yaml").write_text(yaml.safe_dump(self.data, sort_keys=False))
            manifest.write(self.run_dir, exp, self.data)
        if warnings:
            with (self.run_dir / "warnings.log").open("a", encoding="utf-8") as f:
                f.writelines(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} WARNING: {warning}\n" for warning in warnings)
        stack = self._stack
        try:
            self.log = ResultLog(self.run_dir / "results.jsonl")
            stack.callback(self.log.close)
            # registered first, so it runs last: whatever a batch left behind is removed
            stack.callback(self._cleanup_sandboxes)
            upstream = stack.enter_context(policy_server(exp, self.say))
            self.upstream = upstream  # weight updates and health checks go to the policy server itself
            if self.relay is not None:
                self.relay_server = stack.enter_context(self.relay(upstream))
                upstream = self.relay_server.url
            proxy, endpoint = stack.enter_context(capture_proxy(exp, upstream, self.run_dir / "traces.sqlite",
                                                                 self.sampling or None,
                                                                 rollout_header=self.relay is not None))
            tools = stack.enter_context(tool_server(exp, any(t.tools for t in self.taskset.tasks), self.say))
            services = None
            if exp.env.services:
                services = Services(exp.env.services)
                stack.callback(services.stop)
                services.start_run(self.run_dir)
            self.ctx = RunContext(exp=exp, run_id=self.run_id, run_dir=self.run_dir, proxy=proxy, endpoint=endpoint,
                                  source=self.taskset.source, sandbox_class=sandbox_class, tools=tools,
                                  services=services)
            self.say(f"run {self.run_id}: proxy {proxy.url}; run directory {self.run_dir}")
        except BaseException:
            stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _cleanup_sandboxes(self) -> None:
        if self.sandbox_class is None:
            return
        with contextlib.suppress(Exception):
            asyncio.run(self.sandbox_class.cleanup(self.run_id, self.exp.runtime))

    # ------------------------------------------------------------------ batches
    def jobs(self, tasks: list[Task], samples: int, step: int = 0, first_sample: int = 0) -> list[RolloutJob]:
        """``samples`` rollouts of each task (samples ``first_sample`` ...), one group per task, in batch ``step``."""
        return [self.job(task, sample, step)
                for task in tasks for sample in range(first_sample, first_sample + samples)]

    def job(self, task: Task, sample: int, step: int = 0, attempt: int | None = None) -> RolloutJob:
        """One rollout of ``task`` in group (task, ``step``); ``attempt`` (default: ``step``) tells retries apart."""
        return RolloutJob(rollout_id(self.run_id, task.id, sample, step if attempt is None else attempt,
                                     self.incarnation),
                          task, sample, group_id(self.run_id, task.id, step), step if attempt is None else attempt)

    def run(self, jobs: list[RolloutJob], *, concurrency: int | None = None,
            on_start: Callable[[RolloutJob], None] | None = None,
            on_result: OnResult | None = None) -> list[RolloutResult]:
        """Run one batch of rollouts to results (in job order), each appended to results.jsonl as it ends."""
        if self.ctx is None or self.log is None:
            raise RuntimeError("RolloutSession.run outside its `with` block")
        return asyncio.run(run_all(self.ctx, jobs, concurrency or self.exp.rollout.concurrency, self.log,
                                   on_start=on_start, on_result=on_result))

    @property
    def proxy(self) -> Any:
        """The capture proxy's handle (pause/resume, weight version, records)."""
        if self.ctx is None:
            raise RuntimeError("the session is not started")
        return self.ctx.proxy
