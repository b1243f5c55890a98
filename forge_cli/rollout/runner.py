"""Run one rollout: sandbox → task setup → harness through the proxy → verifier → RolloutResult."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from forge_cli.config.schema import Experiment
from forge_cli.envs.services import ServiceError, Services, url_env
from forge_cli.envs.source import SetupError, TaskSource
from forge_cli.envs.task import Task
from forge_cli.envs.verifier import Score, VerifierError, VerifyContext, new_reward_dir, run_verifier
from forge_cli.harness.adapter import Invocation, RolloutContext, ToolsContext, harness_tools, prepare
from forge_cli.proxy.client import ProxyUnreachable
from forge_cli.rollout import tamper
from forge_cli.rollout.result import RolloutResult, Status, ending_status
from forge_cli.rollout.spec import build_spec, task_workdir
from forge_cli.runtime.base import ExecResult, Sandbox, SandboxError, Stream
from forge_cli.runtime.spec import SANDBOX_HOME, ProxyEndpoint

TAIL = 2000
# where the verifier of a task with tools finds every dispatch and the builtin services' final state
TOOL_STATE_PATH = f"{SANDBOX_HOME}/.forge/tool_state.json"

log = logging.getLogger(__name__)


class Proxy(Protocol):
    """What a rollout needs from the capture proxy (forge_cli.proxy.launcher.ProxyHandle)."""

    def register(self, rollout_id: str | None = None, **info: object) -> dict[str, object]: ...
    def finish(self, rollout_id: str, status: str = "finished") -> dict[str, object]: ...
    def calls(self, rollout_id: str) -> list[dict[str, object]]: ...


class Tools(Protocol):
    """What a rollout needs from the tool server (forge_cli.tools.server.ToolServer)."""

    def register(self, rollout_id: str, tools: tuple[Any, ...], state: dict[str, Any] | None = None,
                 log_path: Path | None = None) -> Any: ...
    def state(self, rollout_id: str) -> dict[str, Any]: ...
    def browser_cdp_url(self, rollout_id: str) -> str | None: ...
    def unregister(self, rollout_id: str) -> dict[str, Any]: ...


@dataclass(frozen=True)
class RolloutJob:
    rollout_id: str
    task: Task
    # index of this rollout among its group's
    sample: int
    # the rollouts of one task in one batch (a GRPO group); unique per batch, so a task sampled again later
    # forms a new group
    group_id: str
    # the batch (training step, eval trial round) this rollout belongs to
    step: int = 0
    # sampling parameters the proxy enforces on this rollout's calls over the run's (rollout.sampling), e.g. the
    # eval temperature of forge train's periodic evaluation (None: the run's)
    sampling: dict[str, Any] | None = None
    # its first calls answered from a recording (a replay or a branch: forge_cli/replay): they carry no loss here
    prefix_calls: int = 0


@dataclass(frozen=True)
class RunContext:
    """What every rollout of a run shares."""

    exp: Experiment
    run_id: str
    run_dir: Path
    proxy: Proxy
    # the proxy as sandboxes reach it
    endpoint: ProxyEndpoint
    # where the tasks come from (prepares each task in its sandbox)
    source: TaskSource
    # the sandbox backend of ``exp.runtime.kind``, looked up once for the run (``runtime.registry.backend``)
    sandbox_class: type[Sandbox]
    # the tool server (None: no task of the run has tools)
    tools: Tools | None = None
    # the env's services (None: the env has none)
    services: Services | None = None


def _tail(text: str) -> str:
    return text[-TAIL:]


def harness_status(exp: Experiment, result: ExecResult) -> Status:
    """Map how the harness process ended to a rollout status (its exit_codes table, else agent_error)."""
    if result.timed_out:
        return "timeout"
    return exp.harness.exit_codes.get(result.exit_code if result.exit_code is not None else -1, "agent_error")


class _LogWriter:
    """Harness stdout/stderr streamed to files as it arrives (kept even if forge crashes)."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.files = {s: (directory / f"harness.{s}").open("ab") for s in ("stdout", "stderr")}

    def __call__(self, stream: Stream, chunk: bytes) -> None:
        self.files[stream].write(chunk)
        self.files[stream].flush()

    def close(self) -> None:
        for f in self.files.values():
            f.close()


async def run_rollout(ctx: RunContext, job: RolloutJob) -> RolloutResult:
    """Run one rollout to a result; never raises for anything the harness, sandbox, services or verifier do.

    The rollout runs as phases, each entered on one exit stack that holds its cleanup: the proxy (register; at the
    end its records set the counts and the status it is told), the tools (register; unregister), the task's
    instruction, the env's services (start; stop), the sandbox (create and prepare; stop), the harness, the
    verifier. A phase that fails ends the rollout with the status its error maps to (``_FAILURES``); the
    cleanups of the phases entered so far then run once, in reverse order, whatever happened.
    """
    task = job.task
    log_dir = ctx.run_dir / "rollouts" / job.rollout_id
    log_dir.mkdir(parents=True, exist_ok=True)
    result = RolloutResult(rollout_id=job.rollout_id, task_id=task.id, group_id=job.group_id,
                           harness=ctx.exp.harness.name, status="infra_error", logs=str(log_dir), step=job.step,
                           sample=job.sample, category=task.category, prefix_calls=job.prefix_calls)
    rollout = _Rollout(ctx, job, result, log_dir, time.monotonic())
    async with contextlib.AsyncExitStack() as stack:
        try:
            await rollout.run(stack)
        except Exception as error:  # recorded before the cleanups run: the proxy is told the status it maps to
            _failed(result, error, log_dir)
    result.durations["total"] = round(time.monotonic() - rollout.started, 3)
    return result


@dataclass
class _Rollout:
    """The phases of one rollout (``run_rollout``); what a phase makes is kept for the phases after it."""

    ctx: RunContext
    job: RolloutJob
    result: RolloutResult
    log_dir: Path
    started: float
    info: dict[str, object] = field(default_factory=dict)
    tools: ToolsContext | None = None
    cdp_url: str | None = None
    service_urls: dict[str, str] = field(default_factory=dict)

    async def run(self, stack: contextlib.AsyncExitStack) -> None:
        await self.proxy(stack)
        await self.task_tools(stack)
        instruction = await asyncio.to_thread(self.ctx.source.instruction, self.job.task,
                                              _tool_state(self.ctx, self.job.rollout_id))
        await self.services(stack)
        invocation = self.invocation(instruction)
        sandbox, baseline = await self.sandbox(stack, invocation)
        self.result.durations["setup"] = round(time.monotonic() - self.started, 3)
        run, tampering = await self.harness(sandbox, invocation)
        await self.verify(sandbox, run, baseline, tampering)

    # ------------------------------------------------------------------ phases, in order
    async def proxy(self, stack: contextlib.AsyncExitStack) -> None:
        """Register the rollout at the capture proxy (its key and URL); at the end, read its records."""
        ctx, job = self.ctx, self.job
        self.info = await asyncio.to_thread(
            ctx.proxy.register, job.rollout_id, task=job.task.id, group_id=job.group_id,
            harness=ctx.exp.harness.name, meta={"sample": job.sample, "step": job.step, "run": ctx.run_id},
            **({"sampling": job.sampling} if job.sampling else {}))
        stack.push_async_callback(self._close_proxy)

    async def task_tools(self, stack: contextlib.AsyncExitStack) -> None:
        """The task's tools at the tool server (none: nothing to do); the harness is given the ones it does not
        replace with its own (a native browser reaches the rollout's browser over CDP)."""
        ctx, job = self.ctx, self.job
        if not job.task.tools:
            return
        if ctx.tools is None:
            raise RuntimeError(f"task {job.task.id} has tools but the run has no tool server")
        grant = await asyncio.to_thread(ctx.tools.register, job.rollout_id, job.task.tools, job.task.tool_state,
                                        self.log_dir / "tool_calls.jsonl")
        stack.push_async_callback(self._close_tools, ctx.tools)
        given, native = harness_tools(ctx.exp.harness, job.task.tools)
        self.tools = ToolsContext(given, grant.url, grant.key) if given else None
        if native:
            self.cdp_url = ctx.tools.browser_cdp_url(job.rollout_id)

    async def services(self, stack: contextlib.AsyncExitStack) -> None:
        """The env's per-rollout services (none: nothing to do); stopped at the end even if they half started."""
        if self.ctx.services is None:
            return
        stack.push_async_callback(_quietly, self.ctx.services.stop_rollout, self.job.rollout_id)
        self.service_urls = await self.ctx.services.start_rollout(self.job.rollout_id, self.log_dir)

    def invocation(self, instruction: str) -> Invocation:
        """The harness's config files, env vars and one-shot command for this rollout (sandbox paths as in a
        container; the local backend maps them to its own directories)."""
        ctx, job = self.ctx, self.job
        return prepare(ctx.exp.harness, ctx.exp.model, RolloutContext(
            rollout_id=job.rollout_id, proxy_url=str(self.info.get("sandbox_url") or ctx.endpoint.url),
            api_key=str(self.info["key"]), instruction=instruction, workdir=task_workdir(ctx.exp, job.task),
            home=SANDBOX_HOME, bundle=ctx.exp.runtime.bundle_mount, tools=self.tools,
            browser_cdp_url=self.cdp_url))

    async def sandbox(self, stack: contextlib.AsyncExitStack,
                      invocation: Invocation) -> tuple[Sandbox, dict[str, int] | None]:
        """The rollout's sandbox, created by the run's backend and prepared by the task source; returns it with
        what its filesystem looks like before the harness runs (where the backend can tell from outside)."""
        ctx, job = self.ctx, self.job
        spec = build_spec(ctx.exp, ctx.run_id, job.rollout_id, job.task,
                          {**invocation.env, **url_env(self.service_urls)}, invocation.files,
                          image=ctx.source.image(job.task), backend_class=ctx.sandbox_class)
        sandbox = await ctx.sandbox_class.create(spec, ctx.exp.runtime, log_dir=self.log_dir)
        stack.push_async_callback(_quietly, lambda: asyncio.shield(sandbox.stop()))
        await sandbox.exec(["mkdir", "-p", SANDBOX_HOME], timeout=30)
        await ctx.source.prepare(sandbox, job.task)
        return sandbox, await tamper.system_changes(sandbox)

    async def harness(self, sandbox: Sandbox, invocation: Invocation) -> tuple[ExecResult, tamper.TamperLog]:
        """The harness, one-shot, its output streamed to files; then nothing it started may act any more (not
        while hidden files go in, not while verifying)."""
        exp, result = self.ctx.exp, self.result
        phase = time.monotonic()
        writer = _LogWriter(self.log_dir)
        try:
            run = await sandbox.exec(invocation.argv,
                                     timeout=min(invocation.timeout_s, rollout_timeout(exp, self.job.task)),
                                     on_output=writer, output_limit=1 << 20)
        finally:
            writer.close()
        result.durations["harness"] = round(time.monotonic() - phase, 3)
        result.exit_code = run.exit_code
        result.status = harness_status(exp, run)
        if result.status != "ok":
            result.error = _tail(run.stderr) or _tail(run.stdout) or f"exit code {run.exit_code}"
        tampering = tamper.TamperLog(self.log_dir)
        await tamper.log_survivors(sandbox, tampering)
        await sandbox.kill_processes()
        return run, tampering

    async def verify(self, sandbox: Sandbox, run: ExecResult, baseline: dict[str, int] | None,
                     tampering: tamper.TamperLog) -> None:
        """The task's verifier (none: unscored); what the harness tampered with is kept beside its score."""
        result = self.result
        if self.job.task.verifier is not None:
            phase = time.monotonic()
            try:
                score = await _verify(self.ctx, self.job, sandbox, self.log_dir, run, result.status,
                                      self.service_urls, baseline, tampering)
            finally:
                result.durations["verify"] = round(time.monotonic() - phase, 3)
            result.reward, result.passed = score.reward, score.passed
            result.verifier = score.to_dict()
            if score.details.get("not_judged"):  # the benchmark's judge was needed and could not score it
                result.reward = result.passed = None
                result.error = f"not judged: {score.details['not_judged']}"
        if tampering.lines:
            result.verifier = {**(result.verifier or {}), "tamper": tampering.lines}

    # ------------------------------------------------------------------ cleanups
    async def _close_tools(self, tools: Tools) -> None:
        with contextlib.suppress(Exception):
            self.result.tools = await asyncio.to_thread(tools.unregister, self.job.rollout_id)
            self.result.tool_calls = int(self.result.tools.get("calls", 0))

    async def _close_proxy(self) -> None:
        """The calls first: they can change the status the proxy is then told (``ending_status``)."""
        ctx, result, rid = self.ctx, self.result, self.job.rollout_id
        try:
            _apply_calls(result, await asyncio.to_thread(ctx.proxy.calls, rid), ctx.exp.harness.wire_api)
        except ProxyUnreachable as exc:  # its proxy (replica) died: what the harness did says nothing
            _proxy_lost(result, exc)
        except Exception:  # a record that cannot be read leaves the counts at 0
            pass
        try:
            await asyncio.to_thread(ctx.proxy.finish, rid, result.status)
        except ProxyUnreachable as exc:
            _proxy_lost(result, exc)
        except Exception:  # the rollout's own result stands
            pass


async def _quietly(cleanup: Callable[..., Awaitable[object]], *args: object) -> None:
    """A cleanup whose failure changes nothing about the rollout's result."""
    with contextlib.suppress(Exception):
        await cleanup(*args)


def _failed(result: RolloutResult, error: Exception, log_dir: Path) -> None:
    """The status and error a phase's failure gives the rollout: the sandbox's own status, an infra error for
    the verifier, task setup and services, and for anything else (a service failed: proxy control API, sandbox
    backend) an infra error with its traceback kept in ``rollout-error.log``; the run goes on."""
    if isinstance(error, SandboxError):
        result.status, result.error = error.status, error.message
        return
    result.status = "infra_error"
    if isinstance(error, VerifierError):
        result.error = f"verifier failed: {error} (see {log_dir / 'verifier.log'})"
        result.reward = result.passed = None
    elif isinstance(error, (SetupError, ServiceError)):
        result.error = str(error)
    else:
        result.error = f"{type(error).__name__}: {error}"
        with (log_dir / "rollout-error.log").open("a", encoding="utf-8") as f:
            f.write(traceback.format_exc())


def _tool_state(ctx: RunContext, rollout_id: str) -> Callable[[], dict[str, Any]]:
    """The rollout's state at the tool server, read when called ({} when the run has none)."""
    def read() -> dict[str, Any]:
        return ctx.tools.state(rollout_id) if ctx.tools is not None else {}

    return read


_WARNED: set[tuple[str, str]] = set()


def _proxy_lost(result: RolloutResult, exc: Exception) -> None:
    """The rollout's capture proxy stopped answering: an infra error (never scored or trained on)."""
    why = f"its capture proxy stopped answering: {exc}"
    result.error = f"{why}\n{result.error}" if result.error else why
    result.status = "infra_error"
    result.reward = result.passed = None


def _apply_calls(result: RolloutResult, calls: list[dict[str, Any]], declared: str | None = None) -> None:
    """Call and token counts, calls per wire format, weight versions, and the status the records imply
    (``ending_status``): a rollout the policy server refused as too long ends ``over_length``, one whose calls it
    stopped answering ``infra_error`` (not scored: its reward says nothing about the agent). A harness whose calls
    came in another wire format than its ``wire_api`` declares is warned about once (its config is out of date)."""
    result.calls = len(calls)
    result.wire_formats = dict(Counter(str(c.get("wire_format")) for c in calls))
    if declared and calls and declared not in result.wire_formats and (result.harness, declared) not in _WARNED:
        _WARNED.add((result.harness, declared))
        log.warning("harness %s declares wire_api=%s but its calls came as %s: its config (harness.wire_api) does "
                    "not match what it sends", result.harness, declared, ", ".join(sorted(result.wire_formats)))
    result.prompt_tokens = sum(int(str(c.get("prompt_tokens") or 0)) for c in calls)
    result.completion_tokens = sum(int(str(c.get("completion_tokens") or 0)) for c in calls)
    versions = sorted({str(c["weight_version"]) for c in calls if c.get("weight_version") is not None})
    result.weight_version = ",".join(versions) if versions else None
    status, why = ending_status(result.status, calls)
    if why is None:
        return
    result.error = f"{why}\n{result.error}" if result.error else why
    result.status = status
    if status == "infra_error":
        result.reward = result.passed = None


def rollout_timeout(exp: Experiment, task: Task) -> int:
    """Seconds the harness may run: the task's own limit, else ``rollout.timeout_s``."""
    return task.timeout_s or exp.rollout.timeout_s


async def _verify(ctx: RunContext, job: RolloutJob, sandbox: Sandbox, log_dir: Path, run: ExecResult,
                  harness: str, service_urls: dict[str, str], baseline: dict[str, int] | None,
                  tampering: tamper.TamperLog) -> Score:
    """Hidden files in, a fresh reward directory, then the task's verifier (after the harness's processes died);
    a rollout whose harness changed the verifier's toolchain scores 0 unverified."""
    task = job.task
    assert task.verifier is not None
    changed = await tamper.toolchain_tampering(sandbox, baseline, tampering)
    if changed:
        with (log_dir / "verifier.log").open("a", encoding="utf-8") as f:
            f.write(f"not verified: the harness changed system files the verifier relies on: {', '.join(changed)}\n")
        return Score(reward=0.0, passed=False, details={"not_verified": "the harness changed the verifier's "
                                                                       "toolchain", "changed": changed})
    await tamper.sweep(sandbox, [*task.hidden_files, *([TOOL_STATE_PATH] if task.tools else [])], tampering)
    for path, content in task.hidden_files.items():
        await sandbox.write_file(path, content)
    tool_state = None
    if task.tools and ctx.tools is not None:
        # written after the harness exited: it never saw the state its verifier reads
        tool_state = await asyncio.to_thread(ctx.tools.state, job.rollout_id)
        await sandbox.write_file(TOOL_STATE_PATH, json.dumps(tool_state, default=str))
    reward_dir = new_reward_dir(SANDBOX_HOME)
    made = await sandbox.exec(["mkdir", "-p", reward_dir], timeout=30)
    if not made.ok:
        raise VerifierError(f"cannot create the reward directory: {made.stderr[-300:]}")

    def records() -> list[dict[str, Any]]:
        return ctx.proxy.calls(job.rollout_id)

    vctx = VerifyContext(sandbox=sandbox, task=task, rollout_id=job.rollout_id, reward_dir=reward_dir,
                         timeout_s=task.verifier_timeout_s or ctx.exp.env.verifier_timeout_s, harness_status=harness,
                         final_output=_tail(run.stdout), tool_state=tool_state, services=service_urls,
                         records=records, log_path=log_dir / "verifier.log",
                         env={"FORGE_TOOL_STATE": TOOL_STATE_PATH} if tool_state is not None else {})
    return await run_verifier(task.verifier, vctx)
