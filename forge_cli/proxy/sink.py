"""The addon's side of the store writer: spawn it, hand it frames through a pipe, track its commits."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from forge_cli.traces import frames

# the directory ``forge_cli`` was imported from, symlinks not followed: in the proxy child, the launcher's
# import root that holds only forge's proxy-side packages (``launcher.child_import_root``); in a checkout, its root
IMPORT_ROOT = Path(os.path.abspath(__file__)).parents[2]


class RecordSink:
    """Frames go to ``python -m forge_cli.remote.mitmproxy.writer`` over stdin; commits come back on its stdout.

    ``send`` returns once the frame is in the pipe (the writer outlives a crashed proxy and still
    commits it); it blocks only when the writer falls a whole pipe buffer behind (back-pressure).
    """

    def __init__(self, store_path: str, python: str | None = None) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(IMPORT_ROOT)  # the writer imports forge_cli.traces and forge_cli.proxy only
        self.proc = subprocess.Popen(
            [python or sys.executable, "-m", "forge_cli.remote.mitmproxy.writer", store_path],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=str(IMPORT_ROOT),
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._fd = self.proc.stdin.fileno()
        with contextlib.suppress(OSError):  # a larger pipe absorbs bursts without blocking the event loop
            fcntl.fcntl(self._fd, fcntl.F_SETPIPE_SZ, 1 << 20)
        self.sent = 0
        self.committed = 0
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read_acks, name="forge-writer-acks", daemon=True)
        self._reader.start()

    def send(self, meta: dict[str, Any], blobs: dict[str, bytes]) -> int:
        """Queue one frame; returns its number."""
        self.sent += 1
        meta["n"] = self.sent
        view = memoryview(frames.encode(meta, blobs))
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        return self.sent

    def _read_acks(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                self.committed = max(self.committed, int(line))
            loop = self._loop
            if loop is not None and self._waiters:
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        keep = []
        for n, fut in self._waiters:
            if n <= self.committed:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((n, fut))
        self._waiters = keep

    async def wait_committed(self, n: int | None = None, timeout: float = 30.0) -> bool:
        """Wait until frame ``n`` (default: everything sent so far) is committed."""
        target = self.sent if n is None else n
        if target <= self.committed:
            return True
        self._loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = self._loop.create_future()
        self._waiters.append((target, fut))
        self._wake()
        try:
            await asyncio.wait_for(fut, timeout)
            return True
        except TimeoutError:
            return False

    def close(self, timeout: float = 30.0) -> None:
        """End of input: the writer commits the rest and exits."""
        if self.proc.stdin and not self.proc.stdin.closed:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
