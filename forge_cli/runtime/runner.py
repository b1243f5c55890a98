"""Commands into a local docker container without ``docker exec``: a runner in the container, FIFOs on the host.

Every ``docker exec`` makes the daemon start ``runc exec`` (a process joining the container's namespaces and
cgroups): ~55 ms of machine CPU per command here, a third of a whole sandbox lifecycle (``benchmarks/sandbox.py``),
and the cost that kept forge's docker backend at 1.37-1.44x a raw ``docker run`` at 32 concurrent sandboxes. So the
container's main command starts a small POSIX ``sh`` runner beside its idle ``sleep``; forge talks to it through
named pipes in a host directory bind-mounted read-only at ``MOUNT`` (a FIFO is written and read through a read-only
mount; the agent cannot add or remove files there):

* ``cmd``: forge writes an exec id (hex) per line; the runner holds it open read-write, so lines are never lost;
* ``<id>.sh``: the command (``container.wrap_command``'s script: cd, env, pid file, exec);
* ``<id>.out``, ``<id>.err``: its stdout and stderr, read by forge as they come; ``<id>.rc``: its exit status.

The runner starts each command with ``setsid`` (a session of its own, as ``docker exec`` gives it, so that a
timeout kills its whole process group). An image without ``setsid``, a daemon that is not local, or a runner that
does not answer falls back to ``docker exec`` (``Channel.usable``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

MOUNT = "/.forge-run"
READY_WAIT_S = 3.0  # how long the first command waits for the runner to open its pipe
ALIVE_EVERY_S = 10.0  # a command silent this long: check that its container still runs
_RUNNER = f"""D={MOUNT}
command -v setsid >/dev/null 2>&1 || exit 0
exec 3<>"$D/cmd" || exit 0
while read -r id <&3; do
  case $id in ''|*[!0-9a-f]*) continue;; esac
  {{ setsid /bin/sh "$D/$id.sh" </dev/null >"$D/$id.out" 2>"$D/$id.err"; echo $? >"$D/$id.rc"; }} &
done
"""


def main_command(idle: list[str]) -> list[str]:
    """The container's command: the runner in the background, then the idle command (as before) in its place."""
    return ["/bin/sh", "-c", f"/bin/sh {MOUNT}/runner.sh </dev/null >/dev/null 2>&1 & exec " + " ".join(idle)]


class Channel:
    """The host side of one container's runner."""

    def __init__(self, root: str | None = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="forge-run-", dir=root))
        self.dir.chmod(0o755)
        (self.dir / "runner.sh").write_text(_RUNNER)
        (self.dir / "runner.sh").chmod(0o644)
        os.mkfifo(self.dir / "cmd", 0o666)
        os.chmod(self.dir / "cmd", 0o666)  # the container may run as any user
        self.usable: bool | None = None  # None: not tried yet

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def _submit(self, exec_id: str) -> bool:
        """Hand ``exec_id`` to the runner; False when it is not there (waits for it on first use)."""
        deadline = time.monotonic() + (READY_WAIT_S if self.usable is None else 0.5)
        while True:
            try:
                fd = os.open(self.dir / "cmd", os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno != errno.ENXIO or time.monotonic() > deadline:  # ENXIO: no reader (yet)
                    self.usable = False
                    return False
                time.sleep(0.01)
                continue
            try:
                os.write(fd, f"{exec_id}\n".encode())
            finally:
                os.close(fd)
            self.usable = True
            return True

    def run(self, script: str, emit: Callable[[str, bytes], None], alive: Callable[[], bool]) -> int | bool | None:
        """Run ``script`` (an ``sh`` script), streaming its output to ``emit``; its exit status (None: it ended
        without one, e.g. the container stopped), or False when the runner is not usable (nothing ran)."""
        exec_id = uuid.uuid4().hex
        base = self.dir / exec_id
        paths = {name: Path(f"{base}.{name}") for name in ("out", "err", "rc")}
        Path(f"{base}.sh").write_text(script)
        os.chmod(f"{base}.sh", 0o644)
        fds: dict[int, str] = {}
        try:
            for path in paths.values():
                os.mkfifo(path, 0o666)
                os.chmod(path, 0o666)
            for name in ("out", "err"):
                fds[os.open(paths[name], os.O_RDONLY | os.O_NONBLOCK)] = "stdout" if name == "out" else "stderr"
            if not self._submit(exec_id):
                return False
            if not self._pump(fds, emit, alive):
                return None
            return self._status(paths["rc"], alive)
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            for path in (*paths.values(), Path(f"{base}.sh")):
                with contextlib.suppress(OSError):
                    path.unlink()

    @staticmethod
    def _pump(fds: dict[int, str], emit: Callable[[str, bytes], None], alive: Callable[[], bool]) -> bool:
        """Read both pipes until their writers are gone (Linux reports a hang-up only once a writer came); False
        when the container stopped first."""
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        open_fds = set(fds)
        checked = time.monotonic()
        while open_fds:
            events = poller.poll(1000)
            if not events and time.monotonic() - checked > ALIVE_EVERY_S:  # silent: is the container still there?
                if not alive():
                    return False
                checked = time.monotonic()
            for fd, event in events:
                try:
                    chunk = os.read(fd, 1 << 16)
                except BlockingIOError:
                    continue
                if chunk:
                    emit(fds[fd], chunk)
                elif event & (select.POLLHUP | select.POLLERR):
                    poller.unregister(fd)
                    open_fds.discard(fd)
        return True

    @staticmethod
    def _status(path: Path, alive: Callable[[], bool]) -> int | None:
        """The exit status the runner writes once the command is gone (its output may close earlier)."""
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            data = b""
            checked = time.monotonic()
            while True:
                if poller.poll(1000):
                    chunk = os.read(fd, 64)
                    if not chunk:
                        break
                    data += chunk
                elif time.monotonic() - checked > ALIVE_EVERY_S:  # its output closed early, or its container died
                    if not alive():
                        return None
                    checked = time.monotonic()
            text = data.decode(errors="replace").strip()
            return int(text) if text.isdigit() else None
        finally:
            os.close(fd)
