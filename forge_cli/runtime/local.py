"""local backend: each sandbox is a fresh temp directory (workdir + HOME); each command a process group.

With ``runtime.isolation`` ``auto`` (the default) or ``bwrap``, and bubblewrap usable, every sandbox is
isolated (``forge_cli/runtime/isolation.py``): a holder process owns its user, PID, IPC and UTS namespaces and
a mount namespace in which only the workdir, HOME, the sandbox's own /tmp and directories forge wrote for it
are writable; the harness bundle and system paths (/usr, /bin, /lib, a minimal /etc) are read-only; the run
directory, ``$FORGE_HOME``, other sandboxes, the forge package and every other host path are absent; commands
run as uid 65534 and see only the sandbox's processes. The network is the host's (not enforced). A command
joins the sandbox with ``nsenter``; ``kill_processes`` kills the holder (and with it every process of the
sandbox); the next command starts a new one.

Without isolation (``isolation: none``, or ``auto`` where bubblewrap is missing or cannot create namespaces,
with a loud warning once per run) commands run as the current user on the host, seeing everything it sees.

Either way: the environment is exactly the spec's (plus HOME, and PATH when the spec has none; nothing from the
host), commands start in the sandbox's own workdir, and a command that times out is killed with its whole
process group. Paths under the spec's workdir (and HOME, and the bundle mount) map into the sandbox's
directories. Every running command's process group is recorded on disk, and every process carries the
sandbox's HOME, so that ``cleanup`` can kill what a crashed forge process left running.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import select
import shlex
import shutil
import signal
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from forge_cli.config.schema import LocalRuntime
from forge_cli.errors import UserError
from forge_cli.paths import PACKAGE_DIR, configs_dir, forge_home
from forge_cli.runtime import isolation
from forge_cli.runtime.base import (
    ExecHandle,
    Sandbox,
    SandboxConfigError,
    SandboxGone,
    SandboxUnavailable,
    Stream,
    blocking,
)
from forge_cli.runtime.spec import label_value

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
# where a local sandbox lives is chosen at run time; plans show this placeholder
PLAN_ROOT = "$SANDBOX"


def sandboxes_root() -> Path:
    """Where local sandboxes live: ``$FORGE_SANDBOX_DIR`` or ``<tmp>/forge-sandboxes``."""
    return Path(os.environ.get("FORGE_SANDBOX_DIR") or Path(tempfile.gettempdir()) / "forge-sandboxes")


class _ProcessHandle(ExecHandle):
    def __init__(self, proc: asyncio.subprocess.Process, pids_dir: Path) -> None:
        super().__init__()
        self.proc = proc
        self.pid_file = pids_dir / str(proc.pid)
        self.pid_file.touch()
        self._readers = [asyncio.ensure_future(self._pump("stdout", proc.stdout)),
                         asyncio.ensure_future(self._pump("stderr", proc.stderr))]
        self._ended = asyncio.ensure_future(self._end())

    async def _pump(self, stream: Stream, reader: asyncio.StreamReader | None) -> None:
        assert reader is not None
        while chunk := await reader.read(65536):
            self.queue.put_nowait((stream, chunk))

    async def _end(self) -> None:
        await asyncio.gather(*self._readers, return_exceptions=True)
        self.queue.put_nowait(None)

    async def wait(self) -> int | None:
        code = await self.proc.wait()
        await self._ended
        self.pid_file.unlink(missing_ok=True)
        # a negative return code is a signal: report it the way shells and container runtimes do
        return 128 - code if code < 0 else code

    async def kill(self) -> None:
        _kill_group(self.proc.pid)
        # a process that left the group but kept the pipes open must not hold the readers forever
        try:
            await asyncio.wait_for(asyncio.shield(self._ended), timeout=1.0)
        except TimeoutError:
            for reader in self._readers:
                reader.cancel()
        await self.proc.wait()
        self.pid_file.unlink(missing_ok=True)


class _FailedStart(ExecHandle):
    """A command that could not be started (not found, not executable): exit 127/126 like a shell."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__()
        self.code = code
        self.queue.put_nowait(("stderr", message.encode()))
        self.queue.put_nowait(None)

    async def wait(self) -> int | None:
        return self.code

    async def kill(self) -> None:
        return None


def _kill_group(pgid: int, home: Path | None = None) -> None:
    """SIGKILL a process group; with ``home``, only if its leader still is that sandbox's (pid reuse)."""
    if home is not None:
        try:
            environ = Path(f"/proc/{pgid}/environ").read_bytes().split(b"\0")
        except OSError:
            return
        if f"HOME={home}".encode() not in environ:
            return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


class LocalSandbox(Sandbox):
    kind = "local"
    KILL_GRACE_S = 2.0

    def __init__(self, spec: Any, runtime: LocalRuntime, log_dir: Path | None = None) -> None:
        super().__init__(spec, runtime, log_dir)
        self.root = sandboxes_root() / label_value(spec.run_id) / f"{spec.name}-{os.urandom(3).hex()}"
        self.work = self.root / "work"
        self.home = self.root / "home"
        self.pids = self.root / "pids"
        # with isolation: the sandbox's /tmp and the top-level directories of files written elsewhere
        self.tmp = self.root / "tmp"
        self.fs = self.root / "fs"
        self.isolated = False
        self._holder: _Holder | None = None
        self._holder_lock = asyncio.Lock()

    @classmethod
    def default_runtime(cls) -> LocalRuntime:
        return LocalRuntime(kind="local", description="local sandboxes")

    @property
    def workdir(self) -> str:
        return str(self.work)

    @classmethod
    def network(cls, runtime: Any) -> str:
        return "host"

    @classmethod
    def sandbox_paths(cls, runtime: Any, bundle_host_path: str) -> tuple[str, str, str]:
        # chosen at run time: plans show the placeholder
        return f"{PLAN_ROOT}/work", f"{PLAN_ROOT}/home", bundle_host_path

    @classmethod
    def describe(cls, spec: Any, argv: Sequence[str], runtime: Any) -> dict[str, Any]:
        env = " ".join(shlex.quote(f"{k}={v}") for k, v in spec.env.items())
        mode = getattr(runtime, "isolation", "auto")
        where = ("none: runs as your user, unisolated" if mode == "none" else
                 f"{mode}: bubblewrap (uid 65534, own PID namespace, only workdir/HOME//tmp writable, run directory, "
                 f"$FORGE_HOME and other sandboxes absent; network shared)"
                 + ("" if shutil.which("bwrap") else " -- bwrap is NOT installed here"))
        return {"kind": "local",
                "command": f"mkdir -p {PLAN_ROOT}/work {PLAN_ROOT}/home && cd {spec.workdir} && "
                           f"env -i {env} {shlex.join(argv)}",
                "isolation": where,
                "note": f"{PLAN_ROOT} is a fresh temporary directory; the process group is killed "
                        f"after {spec.timeout_s}s"}

    @classmethod
    def preflight(cls, runtime: Any, run_id: str = "") -> list[str]:
        """The warning of a run whose sandboxes are not isolated (printed once); UserError (exit 1) when
        ``isolation: bwrap`` and bubblewrap is unusable."""
        decision = isolation.decide(getattr(runtime, "isolation", "auto"), isolation.probe())
        if decision.warning is None:
            return []
        isolation.warn_once(decision.warning, run_id)
        return [decision.warning]

    @property
    def layout(self) -> isolation.Layout:
        bundle = self.spec.bundle_host_path
        return isolation.Layout(work=self.work, home=self.home, tmp=self.tmp, fs=self.fs,
                                bundle=Path(bundle) if bundle else None,
                                bundle_mount=self.spec.bundle_mount if bundle else None)

    def _mapping(self, bundle: bool = True) -> list[tuple[str, Path]]:
        """Sandbox paths the spec names → this sandbox's directories on the host (the bundle's too, unless
        ``bundle`` is False: an isolated sandbox mounts it at the spec's path)."""
        mapping = [(self.spec.workdir, self.work), ("/root", self.home)]
        if self.spec.env.get("HOME", "/").rstrip("/"):
            mapping.append((self.spec.env["HOME"].rstrip("/"), self.home))
        if self.spec.bundle_host_path and bundle:
            mapping.append((self.spec.bundle_mount, Path(self.spec.bundle_host_path)))
        return mapping

    def resolve(self, path: str) -> str:
        pure = PurePosixPath(path)
        if not pure.is_absolute():
            return str(self.work / pure)
        if self.isolated:
            return str(isolation.host_path(self.layout, path, self._mapping()))
        for prefix, target in self._mapping():
            with contextlib.suppress(ValueError):
                return str(target / pure.relative_to(prefix))
        return str(pure)

    def localize(self, text: str) -> str:
        """``text`` with the spec's sandbox paths (workdir, HOME, bundle mount) as this sandbox's host paths,
        wherever one starts a path: in argv, and in env values such as PATH=/opt/forge/harness/bin:..."""
        for prefix, target in self._mapping(bundle=not self.isolated):
            if prefix.rstrip("/"):
                pattern = rf"(?<![\w./-]){re.escape(prefix.rstrip('/'))}(?=/|:|$|\s)"
                text = re.sub(pattern, str(target).replace("\\", r"\\"), text)
        return text

    def environment(self, extra: dict[str, str]) -> dict[str, str]:
        env = {"PATH": DEFAULT_PATH, **self.spec.env, **extra}
        env = {name: self.localize(value) for name, value in env.items()}
        env["HOME"] = str(self.home)
        return env

    async def _start(self) -> None:
        if self.spec.bundle_host_path and not Path(self.spec.bundle_host_path).is_dir():
            raise SandboxConfigError(f"harness bundle {self.spec.bundle_host_path} does not exist",
                                     "install it first: forge harness install NAME")
        try:
            decision = isolation.decide(getattr(self.runtime, "isolation", "auto"), await blocking(isolation.probe))
        except UserError as error:
            raise SandboxUnavailable(error.message, error.fix) from None
        self.isolated = decision.isolate
        if decision.warning is not None:
            isolation.warn_once(decision.warning, self.spec.run_id)
        self._log_event("isolation", {"isolated": self.isolated, "warning": decision.warning})
        for directory in (self.work, self.home, self.pids, *((self.tmp, self.fs) if self.isolated else ())):
            directory.mkdir(parents=True, exist_ok=True)

    async def _stop(self) -> None:
        await self._kill_holder()
        await blocking(_remove_sandbox_dir, self.root)

    async def _ensure_holder(self) -> int:
        """The host pid of the sandbox's init, starting its holder when there is none (first command, or after
        kill_processes) or when forge wrote a new top-level directory while no command ran."""
        async with self._holder_lock:
            tops = await blocking(isolation.fs_tops, self.layout)
            holder = self._holder
            if holder is not None and holder.alive() and (tops == holder.tops or any(self.pids.iterdir())):
                return holder.init_pid
            await self._kill_holder()
            self._holder = await _Holder.start(self.layout, tops, self.home)
            return self._holder.init_pid

    async def _kill_holder(self) -> None:
        holder, self._holder = self._holder, None
        if holder is not None:
            await holder.kill()

    async def _start_exec(self, argv: list[str], env: dict[str, str], cwd: str) -> ExecHandle:
        if not Path(cwd).is_dir():
            return _FailedStart(126, f"cd: {cwd}: No such file or directory\n")
        command = [self.localize(arg) for arg in argv]
        if self.isolated:
            nsenter = isolation.probe().nsenter
            assert nsenter is not None
            command = isolation.enter_argv(nsenter, await self._ensure_holder(),
                                           isolation.sandbox_path(self.layout, Path(cwd)), command)
        try:
            proc = await asyncio.create_subprocess_exec(
                *command, cwd=cwd, env=self.environment(env),
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                start_new_session=True)
        except FileNotFoundError:
            return _FailedStart(127, f"{argv[0]}: not found\n")
        except PermissionError:
            return _FailedStart(126, f"{argv[0]}: Permission denied\n")
        return _ProcessHandle(proc, self.pids)

    async def _check_alive(self, result: Any) -> None:
        if not self.work.is_dir():
            raise SandboxGone(f"sandbox directory {self.root} disappeared", result=result)

    async def _kill_processes(self) -> None:
        await self._kill_holder()
        await blocking(_kill_sandbox_processes, self.root)

    async def _write_file(self, path: str, data: bytes) -> None:
        def write() -> None:
            target = Path(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)

        await blocking(write)

    async def _read_file(self, path: str) -> bytes:
        return await blocking(Path(path).read_bytes)

    @classmethod
    async def _cleanup(cls, run_id: str | None, runtime: Any) -> list[str]:
        root = sandboxes_root()
        runs = [root / label_value(run_id)] if run_id else (sorted(root.iterdir()) if root.is_dir() else [])
        removed: list[str] = []
        for run_dir in runs:
            if not run_dir.is_dir():
                continue
            for sandbox_dir in sorted(run_dir.iterdir()):
                await blocking(_remove_sandbox_dir, sandbox_dir)
                removed.append(sandbox_dir.name)
            with contextlib.suppress(OSError):
                run_dir.rmdir()
        return removed


class _Holder:
    """The bubblewrap process that owns an isolated sandbox's namespaces (see ``isolation``)."""

    def __init__(self, proc: asyncio.subprocess.Process, init_pid: int, tops: list[str]) -> None:
        self.proc = proc
        self.init_pid = init_pid
        self.tops = tops

    @classmethod
    async def start(cls, layout: isolation.Layout, tops: list[str], home: Path) -> _Holder:
        found = isolation.probe()
        assert found.bwrap is not None
        system = isolation.system_mounts(lambda p: os.readlink(p) if os.path.islink(p) else None, os.path.isdir)
        hidden = [PACKAGE_DIR, configs_dir(), forge_home(), sandboxes_root()]
        argv = isolation.holder_argv(found.bwrap, layout, tops, system, hidden)
        read_end, write_end = os.pipe()
        # the arguments go through a pipe: the sandbox sees its init's command line, which would name host paths
        options, command = argv[1:-len(isolation.HOLDER_COMMAND)], argv[-len(isolation.HOLDER_COMMAND):]
        with tempfile.TemporaryFile() as args_file:
            args_file.write(b"".join(arg.encode() + b"\0" for arg in options))
            args_file.seek(0)
            args_read = os.dup(args_file.fileno())
        try:
            proc = await asyncio.create_subprocess_exec(
                argv[0], "--info-fd", str(write_end), "--args", str(args_read), *command,
                pass_fds=(write_end, args_read),
                # HOME marks the holder (and everything in the sandbox) as this sandbox's for cleanup
                env={"HOME": str(home), "PATH": DEFAULT_PATH}, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True)
        finally:
            os.close(write_end)
            os.close(args_read)
        init_pid = await blocking(_read_child_pid, read_end, 30.0)
        assert proc.stdout is not None
        with contextlib.suppress(TimeoutError):
            if init_pid is not None and isolation.READY not in (await asyncio.wait_for(proc.stdout.readline(), 30)
                                                                ).decode(errors="replace"):
                init_pid = None
        if init_pid is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            assert proc.stderr is not None
            why = (await proc.stderr.read()).decode(errors="replace").strip()
            await proc.wait()
            raise SandboxUnavailable(f"bubblewrap could not build the sandbox: {why or 'no reason given'}",
                                     isolation.FIX)
        return cls(proc, init_pid, tops)

    def alive(self) -> bool:
        return self.proc.returncode is None and Path(f"/proc/{self.init_pid}").exists()

    async def kill(self) -> None:
        # the init dies with it (--die-with-parent), and with the init every process of the PID namespace
        if self.proc.returncode is None:
            for pid in (self.proc.pid, self.init_pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        await self.proc.wait()


def _read_child_pid(fd: int, timeout: float) -> int | None:
    """The ``child-pid`` bubblewrap reports on its --info-fd (None: it exited or took longer than ``timeout``)."""
    data = b""
    try:
        while select.select([fd], [], [], timeout)[0]:
            chunk = os.read(fd, 4096)
            if not chunk:
                return None
            data += chunk
            with contextlib.suppress(ValueError):
                pid = json.loads(data).get("child-pid")
                return pid if isinstance(pid, int) else None
        return None
    finally:
        os.close(fd)


def _remove_sandbox_dir(root: Path) -> None:
    """Kill every process group still recorded in the sandbox, then delete its directory."""
    _kill_sandbox_processes(root)
    shutil.rmtree(root, ignore_errors=True)


def _kill_sandbox_processes(root: Path) -> None:
    """SIGKILL every process of the sandbox at ``root``: the process groups of its commands, and processes that
    left their group (setsid, daemons) but still carry the sandbox's HOME."""
    pids = root / "pids"
    if pids.is_dir():
        for entry in pids.iterdir():
            if entry.name.isdigit():
                _kill_group(int(entry.name), root / "home")
    # processes that left their group (setsid) still carry the sandbox's HOME; SIGKILL takes effect
    # asynchronously (a PID namespace dies after its init), so look again until none is left
    marker = f"HOME={root / 'home'}".encode()
    for _ in range(100):
        found = False
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit() and int(proc.name) != os.getpid():
                try:
                    if marker in proc.joinpath("environ").read_bytes().split(b"\0"):
                        os.kill(int(proc.name), signal.SIGKILL)
                        found = True
                except OSError:
                    continue
        if not found:
            return
        time.sleep(0.05)
