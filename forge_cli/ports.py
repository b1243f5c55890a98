"""TCP ports on this machine: is one free, and a free one, checked the way forge's servers bind.

Every server forge starts (the capture proxy under mitmproxy, vLLM under uvicorn, the tool server) listens through
asyncio or sets ``SO_REUSEADDR`` itself, so a port whose last connections are still in TIME_WAIT (a previous
``forge eval`` that exited a moment ago) can be bound again at once. A pre-flight check that binds *without*
``SO_REUSEADDR`` calls such a port "in use" for about a minute after every run; :func:`bindable` binds as the
servers do, and still fails where something really listens (Linux refuses a second listener on the same address
unless both ask for ``SO_REUSEPORT``, which forge's servers do not).
"""

from __future__ import annotations

import socket

LOOPBACK = "127.0.0.1"


def _socket(host: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    return sock


def bindable(host: str, port: int) -> bool:
    """Whether a server could listen on ``host:port`` now (as forge's servers bind: with ``SO_REUSEADDR``).

    Raises :class:`socket.gaierror` for a host name that does not resolve (the caller decides what that means).
    """
    with _socket(host) as sock:
        try:
            sock.bind((host, port))
            sock.listen(1)
        except socket.gaierror:
            raise
        except OSError:
            return False
    return True


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port nobody listens on right now."""
    with _socket(host) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
