"""Run one rollout: sandbox → task setup → harness through the proxy → verifier → RolloutResult."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from forge_cli.config.schema import Experiment
from forge_cli.envs.task import Task
from forge_cli.harness.adapter import RolloutContext, ToolsContext, prepare
from forge_cli.rollout.plan import CONTAINER_HOME, build_spec
from forge_cli.rollout.result import RolloutResult, Status
from forge_cli.runtime.base import ExecResult, Sandbox, SandboxError, Stream
from forge_cli.runtime.registry import create_sandbox
from forge_cli.runtime.spec import ProxyEndpoint

TAIL = 2000
# where the verifier of a task with tools finds every dispatch and the builtin services' final state
TOOL_STATE_PATH = f"{CONTAINER_HOME}/.forge/tool_state.json"


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
    def unregister(self, rollout_id: str) -> dict[str, Any]: ...


@dataclass(frozen=True)
class RolloutJob:
    rollout_id: str
    task: Task
    sample: int


@dataclass(frozen=True)
class RunContext:
    """What every rollout of a run shares."""

    exp: Experiment
    run_id: str
    run_dir: Path
    proxy: Proxy
    # the proxy as sandboxes reach it
    endpoint: ProxyEndpoint
    # the tool server (None: no task of the run has tools)
    tools: Tools | None = None


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
    """Run one rollout to a result; never raises for anything the harness or sandbox does."""
    exp, task = ctx.exp, job.task
    log_dir = ctx.run_dir / "rollouts" / job.rollout_id
    result = RolloutResult(rollout_id=job.rollout_id, task_id=task.id, group_id=task.id, harness=exp.harness.name,
                           status="infra_error", logs=str(log_dir))
    started = time.monotonic()
    sandbox: Sandbox | None = None
    registered = tools_registered = False
    try:
        info = await asyncio.to_thread(ctx.proxy.register, job.rollout_id, task=task.id, group_id=task.id,
                                       harness=exp.harness.name, meta={"sample": job.sample, "run": ctx.run_id})
        registered = True
        tools = None
        if task.tools:
            if ctx.tools is None:
                raise RuntimeError(f"task {task.id} has tools but the run has no tool server")
            grant = await asyncio.to_thread(ctx.tools.register, job.rollout_id, task.tools, task.tool_state,
                                            log_dir / "tool_calls.jsonl")
            tools_registered = True
            tools = ToolsContext(task.tools, grant.url, grant.key)
        # sandbox paths as in a container; the local backend maps them to its own directories
        invocation = prepare(exp.harness, exp.model, RolloutContext(
            rollout_id=job.rollout_id, proxy_url=ctx.endpoint.url, api_key=str(info["key"]),
            instruction=task.instruction, workdir=exp.runtime.workdir, home=CONTAINER_HOME,
            bundle=exp.runtime.bundle_mount, tools=tools))
        spec = build_spec(exp, ctx.run_id, job.rollout_id, task, invocation.env, invocation.files)
        sandbox = await create_sandbox(spec, exp.runtime, log_dir=log_dir)
        await sandbox.exec(["mkdir", "-p", CONTAINER_HOME], timeout=30)
        for command in task.setup:
            setup = await sandbox.exec(["bash", "-c", command], timeout=exp.env.verifier_timeout_s)
            if not setup.ok:
                raise SandboxError(f"task setup `{command}` failed (exit {setup.exit_code}): {_tail(setup.stderr)}")
        result.durations["setup"] = round(time.monotonic() - started, 3)

        phase = time.monotonic()
        writer = _LogWriter(log_dir)
        try:
            run = await sandbox.exec(invocation.argv, timeout=invocation.timeout_s, on_output=writer,
                                     output_limit=1 << 20)
        finally:
            writer.close()
        result.durations["harness"] = round(time.monotonic() - phase, 3)
        result.exit_code = run.exit_code
        result.status = harness_status(exp, run)
        if result.status != "ok":
            result.error = _tail(run.stderr) or _tail(run.stdout) or f"exit code {run.exit_code}"

        if task.verify:
            phase = time.monotonic()
            verify_env = {}
            if tools_registered and ctx.tools is not None:
                # written after the harness exited: it never sees the state its verifier reads
                state = await asyncio.to_thread(ctx.tools.state, job.rollout_id)
                await sandbox.write_file(TOOL_STATE_PATH, json.dumps(state, default=str))
                verify_env["FORGE_TOOL_STATE"] = TOOL_STATE_PATH
            check = await sandbox.exec(["bash", "-c", task.verify], timeout=exp.env.verifier_timeout_s,
                                       env=verify_env)
            result.durations["verify"] = round(time.monotonic() - phase, 3)
            result.reward = 1.0 if check.ok else 0.0
            result.verifier = {"command": task.verify, "exit_code": check.exit_code, "timed_out": check.timed_out,
                               "stdout": _tail(check.stdout), "stderr": _tail(check.stderr)}
    except SandboxError as error:
        result.status = error.status
        result.error = error.message
    except Exception as error:  # a service failed (proxy control API, sandbox backend): recorded, run goes on
        result.status = "infra_error"
        result.error = f"{type(error).__name__}: {error}"
    finally:
        if sandbox is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(sandbox.stop())
        if tools_registered and ctx.tools is not None:
            with contextlib.suppress(Exception):
                result.tools = await asyncio.to_thread(ctx.tools.unregister, job.rollout_id)
                result.tool_calls = int(result.tools.get("calls", 0))
        if registered:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(ctx.proxy.finish, job.rollout_id, result.status)
                calls = await asyncio.to_thread(ctx.proxy.calls, job.rollout_id)
                result.calls = len(calls)
                result.prompt_tokens = sum(int(str(c.get("prompt_tokens") or 0)) for c in calls)
                result.completion_tokens = sum(int(str(c.get("completion_tokens") or 0)) for c in calls)
        result.durations["total"] = round(time.monotonic() - started, 3)
    return result
