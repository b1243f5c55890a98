"""The one module that works below mitmproxy's hooks: each client connection's reader and writer.

mitmproxy 11 (the last release for Python 3.11) has no hook for three things the proxy must do, so forge wraps the
reader and writer of every client connection in ``client_connected`` (a public attribute chain:
``Proxyserver.connections[client.id].transports``; no private name is used) and does them there:

* **Slow clients** (``ClientDeadlines``): a client must send each request whole (headers and body) within
  ``timeout`` seconds of its first byte (of connecting, for a connection's first request); a slower one
  (slow-loris: headers or body trickled, a body that stops) gets 408 in its wire format's error shape and its
  connection closed. mitmproxy calls no hook before a request's headers are whole. An idle keep-alive connection
  between requests is left to mitmproxy's own inactivity timeout.
* **mitmproxy's own error answers in the client's shape** (``ClientWriter``): when mitmproxy itself answers (the
  upstream refused the connection or was closed for its timeout, a body over ``body_size_limit``, a request line
  that does not parse) it writes an HTML page, after the ``error`` hook and with no hook to change it (mitmproxy PR
  #7999 adds one, for releases that need Python >= 3.12). The writer sends that answer as JSON in the wire format
  of the request being answered, with the message the addon left for it (``ClientDeadlines.explain``) or
  mitmproxy's own.
* **Lingering close**: closing a client connection, the proxy stops writing, then reads and drops what the client
  still sends (at most ``LINGER_S``) before it closes, so a client still sending a body the proxy refused (413)
  reads the answer instead of a connection reset.
* **Ending a broken stream** (``end_stream``) with its format's error event before mitmproxy closes the client, and
  **closing an upstream connection** whose answer is overdue (``close_upstream``): ``flow.kill()`` cannot stop a
  flow in transit (mitmproxy issue #4711).
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import re
import time
from typing import Any

from mitmproxy import ctx, http

from forge_cli.proxy.guard import error_body

LINGER_S = 2.0
_PAGE_MESSAGE = re.compile(rb"<p>(.*?)</p>", re.S)
_KINDS = {408: "request_timeout", 413: "body_too_large", 502: "bad_gateway", 504: "upstream_timeout"}


def handler(client_id: str) -> Any:
    """mitmproxy's handler of a client connection (``transports`` by connection), if still there."""
    proxyserver = ctx.master.addons.get("proxyserver")
    return proxyserver.connections.get(client_id) if proxyserver is not None else None


def mitmproxy_error_page(data: bytes) -> tuple[int, str] | None:
    """``(status, message)`` when ``data`` is a whole answer mitmproxy made itself (its HTML error page)."""
    if not data.startswith(b"HTTP/1.1 ") or b"\r\n\r\n" not in data:
        return None
    head, _, body = data.partition(b"\r\n\r\n")
    lowered = head.lower()
    if b"\r\nserver: mitmproxy" not in lowered or b"\r\ncontent-type: text/html" not in lowered:
        return None
    try:
        status = int(head[9:12])
    except ValueError:
        return None
    found = _PAGE_MESSAGE.search(body)
    return status, html.unescape(found.group(1).decode("utf-8", "replace")) if found else ""


class ClientWriter:
    """A client connection's writer (wraps mitmproxy's): mitmproxy's own error pages become JSON in the request's
    wire format, and ``close`` lingers (see the module's docstring)."""

    __slots__ = ("inner", "reader")

    def __init__(self, inner: Any, reader: ClientReader) -> None:
        self.inner = inner
        self.reader = reader

    def write(self, data: bytes) -> None:
        if data[:9] == b"HTTP/1.1 " and (page := mitmproxy_error_page(data)) is not None:
            status, message = page
            watched = self.reader
            text = watched.explained or message
            kind = _KINDS.get(status, "proxy_error")
            # error_body prefixes "forge proxy: " to the all-shapes body (no format known)
            body = error_body(watched.fmt, status, text if watched.fmt is None else f"forge proxy: {text}", kind)
            watched.explained = None
            reason = data[13:data.index(b"\r\n")].decode("latin-1")
            data = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
                    "connection: close\r\n\r\n").encode() + body
        self.inner.write(data)

    def close(self) -> None:
        if self.inner.is_closing():
            return
        try:
            self.inner.write_eof()
        except (OSError, RuntimeError, AttributeError):
            self.inner.close()
            return
        asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        deadline = time.monotonic() + LINGER_S
        with contextlib.suppress(Exception):
            while (left := deadline - time.monotonic()) > 0 and await asyncio.wait_for(self.reader.inner.read(1 << 16),
                                                                                        left):
                pass
        self.inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class ClientReader:
    """A client connection's reader (wraps mitmproxy's) noting when the request being read began."""

    __slots__ = ("busy", "expired", "explained", "fmt", "inner", "started", "writer")

    def __init__(self, inner: Any, writer: Any) -> None:
        self.inner = inner
        self.writer = writer
        self.started: float | None = time.monotonic()  # a new connection owes its first request
        self.busy = False  # a whole request was read, its answer is not done yet
        self.fmt: str | None = None  # the wire format of the request being read or answered
        self.explained: str | None = None  # the message of mitmproxy's next error answer (from the addon)
        self.expired = False  # answered 408: what the client still sends is dropped (mitmproxy reads an end)

    async def read(self, n: int = -1) -> bytes:
        data = bytes(await self.inner.read(n))
        if self.expired:
            return b""
        if data and self.started is None:  # a new request's first bytes
            self.started = time.monotonic()
            self.fmt = self.explained = None
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class ClientDeadlines:
    """Every client connection's reader and writer, and the slow-loris guard over them (see the module's
    docstring)."""

    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self.conns: dict[str, ClientReader] = {}
        self.expired = 0

    def connected(self, client_id: str) -> None:
        """Wrap the connection's reader and writer (``client_connected``: before mitmproxy reads from it)."""
        conn = handler(client_id)
        io = conn.transports.get(conn.client) if conn is not None else None
        if io is None or io.reader is None or io.writer is None or not hasattr(io.writer, "write"):
            return
        watched = ClientReader(io.reader, io.writer)
        io.reader = watched
        io.writer = watched.writer = ClientWriter(io.writer, watched)
        self.conns[client_id] = watched

    def disconnected(self, client_id: str) -> None:
        self.conns.pop(client_id, None)

    def headers(self, client_id: str, fmt: str) -> None:
        """A request's headers arrived: its error shape is known."""
        if (watched := self.conns.get(client_id)) is not None:
            watched.fmt = fmt

    def explain(self, client_id: str, message: str) -> None:
        """The message of the error mitmproxy is about to answer this client's request with (``error`` hook)."""
        if (watched := self.conns.get(client_id)) is not None:
            watched.explained = message

    def read(self, client_id: str) -> None:
        """A request arrived whole: no client deadline until it is answered."""
        if (watched := self.conns.get(client_id)) is not None:
            watched.busy, watched.started = True, None

    def answered(self, client_id: str) -> None:
        """Its answer is done: the next request's deadline starts with its first byte."""
        if (watched := self.conns.get(client_id)) is not None:
            watched.busy, watched.started = False, None

    async def watch(self) -> None:
        """Expire slow requests (a few checks per timeout)."""
        while True:
            await asyncio.sleep(min(1.0, max(0.1, self.timeout / 4)))
            now = time.monotonic()
            for client_id, watched in list(self.conns.items()):
                if not watched.busy and watched.started is not None and now - watched.started > self.timeout:
                    self._expire(client_id, watched)

    def _expire(self, client_id: str, watched: ClientReader) -> None:
        self.conns.pop(client_id, None)
        self.expired += 1
        body = error_body(watched.fmt, 408, f"the request did not arrive whole within {self.timeout:g}s "
                                            "(headers and body); the connection is closed", "request_timeout")
        head = (f"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
                "connection: close\r\n\r\n").encode()
        watched.expired = True
        writer = watched.writer.inner if isinstance(watched.writer, ClientWriter) else watched.writer
        with contextlib.suppress(Exception):  # the peer may be gone already
            writer.write(head + body)
            writer.write_eof()  # the client reads the 408, then the end (a close now could reset it)
        asyncio.get_running_loop().call_later(LINGER_S, writer.close)


def end_stream(flow: http.HTTPFlow, event: bytes) -> None:
    """Write a last event (and the end of the chunked body) to a client whose stream mitmproxy is about to close
    because the upstream's broke off; sent before the close, so the client reads a complete stream ending in an
    error event."""
    conn = handler(flow.client_conn.id)
    io = conn.transports.get(flow.client_conn) if conn is not None else None
    if io is None or io.writer is None or flow.response is None:
        return
    chunked = "chunked" in flow.response.headers.get("transfer-encoding", "").lower()
    with contextlib.suppress(Exception):
        io.writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(event), event) if chunked else event)


def close_upstream(flow: http.HTTPFlow) -> None:
    """Close the flow's upstream connection (its answer is overdue): mitmproxy then reports the flow's error."""
    conn = handler(flow.client_conn.id)
    io = conn.transports.get(flow.server_conn) if conn is not None else None
    if io is not None and io.writer is not None:
        io.writer.close()
    else:
        flow.kill()
