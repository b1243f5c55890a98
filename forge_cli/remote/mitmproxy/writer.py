"""The store writer: a separate process fed by the proxy addon through a pipe.

``python -m forge_cli.remote.mitmproxy.writer STORE`` reads frames (``traces/frames.py``) from stdin, assembles each
call record (``proxy/assemble.py``: wire-format parsing happens here, off mitmproxy's event loop), inserts
everything that has arrived in one transaction and then writes the highest committed frame number to stdout.
Commits are grouped: the frames that arrive within ``GROUP_S`` of the first uncommitted one share a transaction
(each commit rewrites the table's and indexes' changed pages; a commit per call or two cost twice the CPU per record
of batches of 16 at 16 concurrent calls, ``benchmarks/proxy.py``). A record is safe once it is in the pipe: if
mitmdump dies (even ``kill -9``) this process still reads what the pipe
holds, commits it and exits at end of input.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from typing import Any

from forge_cli.proxy.assemble import apply
from forge_cli.traces import frames, store

GROUP_S = 0.02  # how long the first frame of a transaction waits for others
GROUP_BYTES = 8 << 20  # a transaction is committed once it holds this much, however soon


def _commit(conn: Any, bodies: list[bytes]) -> int:
    for attempt in range(50):
        try:
            return apply(conn, bodies)
        except Exception as exc:  # e.g. "database is locked" beyond busy_timeout: retry, never drop
            conn.rollback()
            print(f"forge writer: commit failed ({exc!r}), retry {attempt + 1}", file=sys.stderr)
            time.sleep(0.2)
    raise SystemExit("forge writer: could not commit records")


def run(path: str, fd_in: int = 0, fd_out: int = 1, group_s: float = GROUP_S) -> None:
    """Read frames until end of input, committing them in groups (``GROUP_S``, ``GROUP_BYTES``)."""
    conn = store.open_store(path)
    buf = bytearray()
    pending: list[bytes] = []
    pending_bytes = 0
    first = 0.0
    acks = True
    eof = False
    while not eof or pending:
        wait = first + group_s - time.monotonic() if pending else None
        if not eof and (wait is None or (wait > 0 and select.select([fd_in], [], [], wait)[0])):
            chunk = os.read(fd_in, 1 << 22)
            if not chunk:
                eof = True
            buf += chunk
            bodies = frames.split(buf)
            if bodies and not pending:
                first = time.monotonic()
            pending += bodies
            pending_bytes += sum(len(b) for b in bodies)
            if not eof and pending_bytes < GROUP_BYTES and time.monotonic() < first + group_s:
                continue
        if not pending:
            continue
        top = _commit(conn, pending)
        pending, pending_bytes = [], 0
        if acks:
            try:
                os.write(fd_out, f"{top}\n".encode())
            except OSError:  # the proxy is gone: keep draining and committing what the pipe holds
                acks = False
    conn.close()


if __name__ == "__main__":
    # Ctrl-C reaches the whole process group: this process ends at end of input, after its last commit
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    run(sys.argv[1])
