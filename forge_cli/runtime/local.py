"""local backend: each sandbox is a fresh temp directory (workdir + HOME); each command a process group.

No isolation beyond that: commands run as the current user on the host. What it does guarantee:
the environment is exactly the spec's (plus HOME, and PATH when the spec has none; nothing from the
host), commands start in the sandbox's own workdir, and a command that times out is killed with its
whole process group. Paths under the spec's workdir (and HOME, and the bundle mount) map into the
sandbox's directories. Every running command's process group is recorded on disk so that
``cleanup`` can kill what a crashed forge process left running.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from forge_cli.config.schema import LocalRuntime
from forge_cli.runtime.base import ExecHandle, Sandbox, SandboxConfigError, SandboxGone, Stream, blocking
from forge_cli.runtime.spec import label_value

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


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

    @classmethod
    def default_runtime(cls) -> LocalRuntime:
        return LocalRuntime(kind="local", description="local sandboxes")

    @property
    def workdir(self) -> str:
        return str(self.work)

    def _mapping(self) -> list[tuple[str, Path]]:
        """Sandbox paths the spec names → this sandbox's directories on the host."""
        mapping = [(self.spec.workdir, self.work), ("/root", self.home)]
        if self.spec.env.get("HOME", "/").rstrip("/"):
            mapping.append((self.spec.env["HOME"].rstrip("/"), self.home))
        if self.spec.bundle_host_path:
            mapping.append((self.spec.bundle_mount, Path(self.spec.bundle_host_path)))
        return mapping

    def resolve(self, path: str) -> str:
        pure = PurePosixPath(path)
        if not pure.is_absolute():
            return str(self.work / pure)
        for prefix, target in self._mapping():
            with contextlib.suppress(ValueError):
                return str(target / pure.relative_to(prefix))
        return str(pure)

    def localize(self, text: str) -> str:
        """``text`` with the spec's sandbox paths (workdir, HOME, bundle mount) as this sandbox's host paths,
        wherever one starts a path: in argv, and in env values such as PATH=/opt/forge/harness/bin:..."""
        for prefix, target in self._mapping():
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
        for directory in (self.work, self.home, self.pids):
            directory.mkdir(parents=True, exist_ok=True)

    async def _stop(self) -> None:
        await blocking(_remove_sandbox_dir, self.root)

    async def _start_exec(self, argv: list[str], env: dict[str, str], cwd: str) -> ExecHandle:
        if not Path(cwd).is_dir():
            return _FailedStart(126, f"cd: {cwd}: No such file or directory\n")
        try:
            proc = await asyncio.create_subprocess_exec(
                *[self.localize(arg) for arg in argv], cwd=cwd, env=self.environment(env),
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


def _remove_sandbox_dir(root: Path) -> None:
    """Kill every process group still recorded in the sandbox, then delete its directory."""
    pids = root / "pids"
    if pids.is_dir():
        for entry in pids.iterdir():
            if entry.name.isdigit():
                _kill_group(int(entry.name), root / "home")
    # processes that left their group (setsid) still carry the sandbox's HOME
    marker = f"HOME={root / 'home'}".encode()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                if marker in proc.joinpath("environ").read_bytes().split(b"\0"):
                    os.kill(int(proc.name), signal.SIGKILL)
            except OSError:
                continue
    shutil.rmtree(root, ignore_errors=True)
