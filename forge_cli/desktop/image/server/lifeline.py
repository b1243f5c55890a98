#!/usr/bin/env python3
"""forge-desktop's lifeline: the container lives exactly as long as forge holds one connection to it.

start.sh runs this in the foreground last: `lifeline.py [--ready FILE] [SOCKET]`. It listens on a unix socket
(default /relay/lifeline.sock, in the directory forge bind-mounts), creates FILE once it listens, waits up to
$FORGE_DESKTOP_CONNECT_S seconds (default 120) for one connection and exits 3 if none comes; then it reads (and
ignores) whatever arrives until end-of-file and exits 0. forge holds that connection open for the desktop's life;
when forge goes away, even by SIGKILL, the kernel closes the connection, this program exits, start.sh exits, and
the container (run with --init --rm) ends. SIGTERM/SIGINT end it too. FILE is removed on exit.
Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys

DEFAULT_SOCKET = "/relay/lifeline.sock"
DEFAULT_CONNECT_S = 120.0


def _deadline() -> float:
    try:
        value = float(os.environ.get("FORGE_DESKTOP_CONNECT_S", DEFAULT_CONNECT_S))
    except ValueError:
        return DEFAULT_CONNECT_S
    return value if value > 0 else DEFAULT_CONNECT_S


def serve(path: str, connect_s: float, ready: str | None = None) -> int:
    """Wait for one connection and hold it until EOF; 0 after EOF, 3 when nobody connected in time.

    ready, when given, is a file created once the socket listens (so a client that sees it can connect at once)
    and removed on exit.
    """
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(path)
        os.chmod(path, 0o666)  # forge on the host may run as another user than the container's
        listener.listen(1)
        if ready:
            with open(ready, "w"):
                pass
        listener.settimeout(connect_s)
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            sys.stderr.write(f"lifeline: nobody connected to {path} within {connect_s:g} s; exiting\n")
            return 3
    finally:
        listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    with conn:
        conn.settimeout(None)
        while True:
            try:
                data = conn.recv(65536)
            except (ConnectionResetError, OSError):
                break
            if not data:
                break
    sys.stderr.write("lifeline: forge closed the connection; exiting\n")
    return 0


def _remove(path: str | None) -> None:
    if path:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    ready = None
    if len(args) >= 2 and args[0] == "--ready":
        ready = args[1]
        del args[:2]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        return serve(args[0] if args else DEFAULT_SOCKET, _deadline(), ready)
    except KeyboardInterrupt:
        return 0
    finally:
        _remove(ready)


if __name__ == "__main__":
    sys.exit(main())
