"""The sandbox interface every backend implements, and the exec machinery they share.

Modelled on inspect_ai's sandbox providers: a backend is a :class:`Sandbox` subclass with lifecycle
classmethods (``create``, ``cleanup``) and instance methods (``exec``, ``write_file``, ``read_file``,
``stop``); one conformance suite (``tests/runtime/test_conformance.py``) holds every backend to the
same behaviour.

Async throughout: rollouts run N sandboxes concurrently on one event loop; blocking SDK calls (docker,
kubernetes) run in worker threads. Outcomes are kept apart:

- the command failed → :class:`ExecResult` with a non-zero ``exit_code`` (the agent's problem);
- the command ran past its timeout → ``ExecResult.timed_out`` (killed, partial output kept);
- the sandbox itself failed (daemon gone, container killed or out of memory, deadline passed, bad
  image) → :class:`SandboxError` with ``status`` ``infra_error`` or ``timeout``.
"""

from __future__ import annotations

import abc
import asyncio
import concurrent.futures
import contextlib
import functools
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import Any, ClassVar, Literal, TypeVar

from forge_cli.errors import UserError
from forge_cli.runtime.spec import SANDBOX_HOME, ProxyEndpoint, SandboxSpec

log = logging.getLogger("forge.runtime")

Stream = Literal["stdout", "stderr"]
# called with each chunk of output as it arrives: ("stdout" | "stderr", bytes)
OutputCallback = Callable[[Stream, bytes], None]
# stdout and stderr are each kept up to this many bytes (the callback still sees everything)
DEFAULT_OUTPUT_LIMIT = 64 * 1024 * 1024
Status = Literal["infra_error", "timeout"]


class SandboxError(UserError):
    """The sandbox failed (not the command in it). ``status`` is what a rollout records."""

    status: Status = "infra_error"

    def __init__(self, message: str, fix: str | None = None, *, status: Status | None = None,
                 result: ExecResult | None = None) -> None:
        super().__init__(message, fix, exit_code=1)  # the machine must be fixed (forge's exit-code rule)
        if status is not None:
            self.status = status
        # what the interrupted command printed before the sandbox failed
        self.result = result


class SandboxUnavailable(SandboxError):
    """The backend cannot be reached (dockerd down, no kube context, API server unreachable)."""


class SandboxConfigError(SandboxError):
    """The spec cannot be run as given (image missing, malformed resources)."""


class SandboxGone(SandboxError):
    """The sandbox died under a running rollout: killed, removed, or past its deadline."""


class SandboxOutOfMemory(SandboxError):
    """A command in the sandbox was killed by the out-of-memory killer at the sandbox's memory limit."""


@dataclass
class ExecResult:
    """How one command in a sandbox ended."""

    # None when the command was killed for running past its timeout
    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    duration_s: float = 0.0
    # True when stdout or stderr exceeded the output limit and was cut (the callback saw all of it)
    truncated: bool = False
    stdout_bytes: bytes = field(default=b"", repr=False)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


# blocking SDK calls (docker, kubernetes, file I/O) run here: asyncio's default pool has only cpu+4 threads,
# which would queue the calls of 32 concurrent sandboxes behind each other on a small machine
_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=256, thread_name_prefix="forge-sandbox")
R = TypeVar("R")


async def blocking(fn: Callable[..., R], *args: Any) -> R:
    """Run a blocking call in forge's sandbox thread pool."""
    return await asyncio.get_running_loop().run_in_executor(_POOL, functools.partial(fn, *args))


class ExecHandle(abc.ABC):
    """One running command: its output chunks arrive on ``queue``; ``None`` ends the stream."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[tuple[Stream, bytes] | None] = asyncio.Queue()

    @abc.abstractmethod
    async def wait(self) -> int | None:
        """The exit code once the command ended (None: unknown, e.g. the sandbox died)."""

    @abc.abstractmethod
    async def kill(self) -> None:
        """Kill the command and everything it started (its process group)."""


class ThreadedExecHandle(ExecHandle):
    """An exec whose output is read by a blocking function in a worker thread (docker, kubernetes).

    ``reader(emit)`` blocks, calls ``emit(stream, chunk)`` for each chunk and returns the exit code;
    chunks cross to the event loop with ``call_soon_threadsafe``.
    """

    def __init__(self, reader: Callable[[Callable[[Stream, bytes], None]], int | None],
                 killer: Callable[[], Any], name: str) -> None:
        super().__init__()
        loop = asyncio.get_running_loop()
        self._done: asyncio.Future[int | None] = loop.create_future()
        self._killer = killer

        def to_loop(fn: Callable[..., Any], *args: Any) -> None:
            # the loop may be gone when a command outlives its caller (killed on timeout, loop closed)
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(fn, *args)

        def emit(stream: Stream, chunk: bytes) -> None:
            if chunk:
                to_loop(self.queue.put_nowait, (stream, chunk))

        def run() -> None:
            try:
                code: int | None = reader(emit)
            except BaseException as error:  # handed to the awaiting coroutine
                to_loop(_settle, self._done, None, error)
            else:
                to_loop(_settle, self._done, code, None)
            finally:
                to_loop(self.queue.put_nowait, None)

        threading.Thread(target=run, name=f"forge-exec-{name}", daemon=True).start()

    async def wait(self) -> int | None:
        return await self._done

    async def kill(self) -> None:
        await blocking(self._killer)


def _settle(future: asyncio.Future[int | None], value: int | None, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


class _Collector:
    def __init__(self, limit: int, callback: OutputCallback | None) -> None:
        self.limit = limit
        self.callback = callback
        self.buffers: dict[Stream, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        self.truncated = False

    def add(self, stream: Stream, chunk: bytes) -> None:
        buffer = self.buffers[stream]
        room = self.limit - len(buffer)
        if room < len(chunk):
            self.truncated = True
        if room > 0:
            buffer += chunk[:room]
        if self.callback is not None:
            self.callback(stream, chunk)

    def result(self, code: int | None, timed_out: bool, started: float) -> ExecResult:
        out, err = bytes(self.buffers["stdout"]), bytes(self.buffers["stderr"])
        return ExecResult(exit_code=code, stdout=out.decode("utf-8", "replace"), stderr=err.decode("utf-8", "replace"),
                          timed_out=timed_out, duration_s=time.monotonic() - started, truncated=self.truncated,
                          stdout_bytes=out)


S = TypeVar("S", bound="Sandbox")


class Sandbox(abc.ABC):
    """One rollout's sandbox. Create with ``await Backend.create(spec, runtime)``; use as an async context.

    Backends implement the ``_``-prefixed hooks; everything a caller sees (deadline, timeouts, output
    collection and streaming, logging, error mapping) lives here once.
    """

    kind: ClassVar[str]
    # seconds a killed command gets to deliver its last output
    KILL_GRACE_S: ClassVar[float] = 5.0

    def __init__(self, spec: SandboxSpec, runtime: Any, log_dir: Path | None = None) -> None:
        self.spec = spec
        self.runtime = runtime
        self.log_dir = log_dir
        self.created_at = time.monotonic()
        self.deadline = self.created_at + spec.timeout_s
        self.stopped = False

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    async def create(cls: type[S], spec: SandboxSpec, runtime: Any = None, *, log_dir: Path | None = None) -> S:
        """Start a sandbox for ``spec`` and write its files; stopped again if any step fails."""
        sandbox = cls(spec, runtime if runtime is not None else cls.default_runtime(), log_dir)
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
        async def start() -> None:
            await sandbox._start()
            for path, content in spec.files.items():
                await sandbox.write_file(path, content)

        starting = asyncio.ensure_future(start())
        try:
            await asyncio.shield(starting)
        except BaseException:
            # cancelled or failed: let a creation already under way in a worker thread finish, so that
            # stop() finds and removes what it made instead of leaving an orphan
            with contextlib.suppress(BaseException):
                await starting
            with contextlib.suppress(Exception):
                await asyncio.shield(sandbox.stop())
            raise
        sandbox._log_event("created", {"kind": cls.kind, "name": spec.name, "labels": spec.all_labels})
        return sandbox

    async def stop(self) -> None:
        """Remove the sandbox and everything in it (idempotent). Logs stay in ``log_dir``."""
        if self.stopped:
            return
        self.stopped = True
        await self._stop()
        self._log_event("stopped", {})

    async def kill_processes(self) -> None:
        """Kill every process still running in the sandbox (what a harness left behind, daemons included), so that
        nothing the agent started can act after it exited, e.g. while its rollout is verified."""
        self._check_usable()
        await self._kill_processes()
        self._log_event("processes-killed", {})

    @classmethod
    async def cleanup(cls, run_id: str | None = None, runtime: Any = None) -> list[str]:
        """Remove every sandbox of ``run_id`` (all forge sandboxes when None) left behind, e.g. by a crash.

        Returns the names of what was removed.
        """
        return await cls._cleanup(run_id, runtime if runtime is not None else cls.default_runtime())

    @classmethod
    def default_runtime(cls) -> Any:
        """The runtime config used when none is given (the shipped defaults)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ what callers need to know of a backend
    @classmethod
    def proxy_endpoint(cls, runtime: Any, advertise_host: str, port: int, replica: int = 0) -> ProxyEndpoint:
        """How this backend's sandboxes reach a capture proxy listening on ``port`` (host networking: the
        advertised host); ``replica``: which of the run's proxies (``proxy.url``'s order) it is."""
        return ProxyEndpoint(advertise_host, port)

    @classmethod
    def check_tool_server(cls, runtime: Any, advertise_host: str) -> None:
        """Whether this backend's sandboxes reach forge's tool server advertised as ``advertise_host``; UserError
        (exit 2) with the fix when they cannot. Local and docker sandboxes do (host networking)."""
        return None

    @classmethod
    def check_proxy(cls, runtime: Any, proxy_url: str | None) -> None:
        """Whether this backend's sandboxes can reach the run's capture proxy: forge's own local one
        (``proxy_url`` None) or the one at ``proxy_url``; UserError (exit 2) with the fix when they cannot.
        Local and docker sandboxes reach either (host networking)."""
        return None

    @classmethod
    def preflight(cls, runtime: Any, run_id: str = "") -> list[str]:
        """Checked once before a run's sandboxes start: warnings the run should record (printed already), or a
        UserError when the backend cannot run as configured."""
        return []

    @classmethod
    def network(cls, runtime: Any) -> str:
        """The spec's ``network`` for this backend: "host", a network name, or "proxy-only"."""
        return str(getattr(runtime, "network", "host"))

    @classmethod
    def sandbox_paths(cls, runtime: Any, bundle_host_path: str) -> tuple[str, str, str]:
        """(workdir, HOME, harness bundle) as a harness in this backend's sandboxes sees them."""
        return runtime.workdir, SANDBOX_HOME, runtime.bundle_mount

    @classmethod
    def describe(cls, spec: SandboxSpec, argv: Sequence[str], runtime: Any) -> dict[str, Any]:
        """The sandbox as a user would create it by hand (dry runs print it); ``kind`` plus backend fields."""
        return {"kind": cls.kind}

    async def __aenter__(self: S) -> S:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()

    # ------------------------------------------------------------------ exec
    async def exec(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        on_output: OutputCallback | None = None,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
    ) -> ExecResult:
        """Run ``argv`` (no shell) with stdin closed, in ``cwd`` (default: the workdir; relative paths are
        relative to it), with the sandbox's env plus ``env``. Output streams to ``on_output``.

        Returns the result whatever the exit code; ``timed_out`` when ``timeout`` (or the sandbox's
        deadline) passed and the command was killed. Raises :class:`SandboxError` when the sandbox failed.
        """
        if not argv:
            raise ValueError("exec needs a command")
        self._check_usable()
        remaining = self.deadline - time.monotonic()
        limit = remaining if timeout is None else min(timeout, remaining)
        workdir = self.resolve(cwd) if cwd else self.workdir
        started = time.monotonic()
        collector = _Collector(output_limit, on_output)
        handle = await self._start_exec(list(argv), dict(env or {}), workdir)
        timed_out = False
        try:
            try:
                await asyncio.wait_for(self._drain(handle, collector), timeout=max(limit, 0.001))
            except TimeoutError:
                timed_out = True
                await handle.kill()
                # the last output still in flight
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._drain(handle, collector), timeout=self.KILL_GRACE_S)
            code = None if timed_out else await handle.wait()
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.shield(handle.kill())
            raise
        result = collector.result(code, timed_out, started)
        self._log_event("exec", {"argv": list(argv), "cwd": workdir, "exit_code": code, "timed_out": timed_out,
                                 "duration_s": round(result.duration_s, 3)}, result)
        if timed_out and (timeout is None or timeout >= remaining):
            raise SandboxGone(f"sandbox {self.spec.name} ran past its deadline of {self.spec.timeout_s}s",
                              status="timeout", result=result)
        if code is None or code >= 128 or timed_out:
            # a signal: was it the command, or did the sandbox itself go away?
            await self._check_alive(result)
        return result

    async def _drain(self, handle: ExecHandle, collector: _Collector) -> None:
        while (item := await handle.queue.get()) is not None:
            collector.add(*item)
        await handle.wait()

    def _check_usable(self) -> None:
        if self.stopped:
            raise SandboxGone(f"sandbox {self.spec.name} was stopped")
        if time.monotonic() >= self.deadline:
            raise SandboxGone(f"sandbox {self.spec.name} ran past its deadline of {self.spec.timeout_s}s",
                              status="timeout")

    # ------------------------------------------------------------------ files
    async def write_file(self, path: str, content: str | bytes) -> None:
        """Write ``content`` (text is UTF-8 encoded) to ``path``, creating parent directories."""
        self._check_usable()
        data = content.encode() if isinstance(content, str) else content
        await self._write_file(self.resolve(path), data)

    async def read_file(self, path: str) -> bytes:
        """The bytes of ``path``; FileNotFoundError if it does not exist, IsADirectoryError for a directory."""
        self._check_usable()
        return await self._read_file(self.resolve(path))

    # ------------------------------------------------------------------ paths
    @property
    def workdir(self) -> str:
        """The working directory as this backend's commands see it."""
        return self.spec.workdir

    def resolve(self, path: str) -> str:
        """A path as the sandbox sees it: relative paths are relative to the workdir."""
        pure = PurePosixPath(path)
        return str(pure if pure.is_absolute() else PurePosixPath(self.workdir) / pure)

    # ------------------------------------------------------------------ logs
    def _log_event(self, event: str, data: dict[str, Any], result: ExecResult | None = None) -> None:
        if self.log_dir is None:
            return
        record = {"t": round(time.time(), 3), "event": event, "sandbox": self.spec.name, **data}
        with (self.log_dir / "sandbox.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        if result is not None:
            stem = f"exec-{uuid.uuid4().hex[:8]}"
            with (self.log_dir / "sandbox-output.log").open("a", encoding="utf-8") as f:
                f.write(f"=== {stem} {json.dumps(data.get('argv'))} exit={result.exit_code}"
                        f" timed_out={result.timed_out}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}\n")

    # ------------------------------------------------------------------ backend hooks
    @abc.abstractmethod
    async def _start(self) -> None:
        """Create the sandbox (raise SandboxError subclasses on failure)."""

    @abc.abstractmethod
    async def _stop(self) -> None:
        """Remove the sandbox (idempotent, tolerant of it being gone already)."""

    @abc.abstractmethod
    async def _start_exec(self, argv: list[str], env: dict[str, str], cwd: str) -> ExecHandle:
        """Start ``argv`` with stdin closed and return its handle."""

    @abc.abstractmethod
    async def _check_alive(self, result: ExecResult) -> None:
        """After a command died of a signal: raise SandboxGone if the sandbox itself died (killed, OOM)."""

    @abc.abstractmethod
    async def _kill_processes(self) -> None:
        """Kill every process in the sandbox (a container's init excepted)."""

    @abc.abstractmethod
    async def _write_file(self, path: str, data: bytes) -> None: ...

    @abc.abstractmethod
    async def _read_file(self, path: str) -> bytes: ...

    @classmethod
    @abc.abstractmethod
    async def _cleanup(cls, run_id: str | None, runtime: Any) -> list[str]: ...
