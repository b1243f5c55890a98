"""What keeps the proxy's HTTP surface safe from bad peers: slow clients, broken upstream answers, error shapes.

* ``ClientDeadlines``: a client must send each request whole (headers and body) within ``timeout`` seconds of its
  first byte (of connecting, for a connection's first request); a slower one (slow-loris: headers or body
  trickled, a body that stops) gets 408 in its wire format's error shape and its connection closed. An idle
  keep-alive connection between requests is left to mitmproxy's own inactivity timeout.
  Closing a client connection lingers: the proxy stops writing, then reads and drops what the client still
  sends (at most ``LINGER_S``) before it closes, so a client that was still sending a body the proxy refused
  (413) reads the answer instead of a connection reset.
* ``answer_problem``: why an upstream's non-error answer cannot be served (a status other than 200, not JSON,
  not a chat completion), checked without parsing the body.
* ``streamer``: a call's SSE answer through its format's ``ClientStream``; a broken-off upstream stream (truncated,
  unreadable, stalled) ends the client's stream in its format's error event (``ClientStream.fail``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

from forge_cli.proxy.wire import FORMATS
from forge_cli.proxy.wire.base import openai_error

LINGER_S = 2.0
_GOOGLE = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 404: "NOT_FOUND", 408: "DEADLINE_EXCEEDED",
           413: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED", 502: "UNAVAILABLE", 503: "UNAVAILABLE",
           504: "DEADLINE_EXCEEDED"}


def error_body(fmt: str | None, status: int, message: str, kind: str) -> bytes:
    """An error body in ``fmt``'s shape (OpenAI's for chat, responses and unknown routes); ``fmt=None`` (not known
    yet: mitmproxy's own errors, a request whose headers never came whole) one body in every client's shape at
    once: OpenAI's and Anthropic's SDKs read ``error.message``/``error.type``, Google's ``error.code``/``.status``."""
    if fmt is None:
        status_name = _GOOGLE.get(status, "INVALID_ARGUMENT" if status < 500 else "INTERNAL")
        return json.dumps({"type": "error", "error": {"type": kind, "message": f"forge proxy: {message}",
                                                      "code": status, "status": status_name, "param": None}},
                          separators=(",", ":")).encode()
    fmt_ = FORMATS.get(fmt)
    return (fmt_.error if fmt_ is not None else openai_error)(status, message, kind)


def openai_shaped(raw: bytes) -> bool:
    """Is an upstream error body already OpenAI's ``{"error": {"message": ...}}`` (what clients of chat and
    responses parse)?"""
    try:
        obj = json.loads(raw)
    except ValueError:
        return False
    return isinstance(obj, dict) and isinstance(obj.get("error"), dict) and isinstance(obj["error"].get("message"),
                                                                                       str)


def upstream_message(raw: bytes) -> str:
    """The message of an upstream error body (JSON or not)."""
    try:
        obj = json.loads(raw)
    except ValueError:
        return raw[:300].decode("utf-8", "replace")
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if obj.get("message"):
            return str(obj["message"])
    return raw[:300].decode("utf-8", "replace")


def end_stream(io: Any, response: Any, event: bytes) -> None:
    """Write a last event (and the end of the chunked body) to a client whose stream mitmproxy is about to close
    because the upstream's broke off (``io``: the client's mitmproxy transports); sent before the close, so the
    client reads a complete stream ending in an error event."""
    if io is None or io.writer is None or response is None:
        return
    chunked = "chunked" in response.headers.get("transfer-encoding", "").lower()
    with contextlib.suppress(Exception):
        io.writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(event), event) if chunked else event)


def answer_problem(status: int, content_type: str, raw: bytes) -> str | None:
    """Why a non-error, non-streamed upstream answer is not a chat completion the proxy can serve (None: it is)."""
    if status != 200:
        return f"upstream answered {status} where a model call answers 200"
    if "json" not in content_type.lower():
        return f"upstream answered content-type {content_type or 'none'!r}, not JSON"
    head = raw.lstrip()[:1]
    if head != b"{" or b'"choices"' not in raw or raw.rstrip()[-1:] != b"}":
        return f"upstream answer is not a chat completion: {raw[:120].decode('utf-8', 'replace')!r}"
    return None


def streamer(call: Any, record: Callable[[str, str | None], None]) -> Callable[[bytes], list[bytes]]:
    """mitmproxy's stream callback for a call's SSE answer: chunks through the call's transformer to the client,
    the record made (``record(status, error)``) once the terminal event is through, before it reaches the client.
    A stream that ends without its terminal event, or whose chunks do not read (wrong types inside), ends the
    client's stream in its format's error event and is recorded ``incomplete``."""
    chunks: list[bytes] = call.chunks
    transformer = call.transformer
    broken: list[str] = []  # why the stream cannot go on (then nothing more reaches the client)

    def on_chunk(data: bytes) -> list[bytes]:
        if broken:
            return []
        if data:
            chunks.append(data)
            call.t_last = time.time()
        try:
            out = transformer.feed(data)
        except Exception as exc:
            broken.append(f"unreadable upstream stream: {type(exc).__name__}: {str(exc)[:200]}")
            out = b""
        if not broken and not data and not transformer.done:
            broken.append("upstream stream ended before its terminal event")
        if broken:
            record("incomplete", broken[0])
            return [out + transformer.fail(f"forge proxy: {broken[0]}")]
        if transformer.done and not call.recorded:
            failed = b'{"error"' in b"".join(chunks)  # an error chunk before [DONE]
            record("upstream_error" if failed else "ok", "upstream stream reported an error" if failed else None)
        return [out] if out else []

    return on_chunk


class _Lingering:
    """A client connection's writer (wraps mitmproxy's) whose ``close`` lingers (see the module's docstring)."""

    __slots__ = ("inner", "reader")

    def __init__(self, inner: Any, reader: Any) -> None:
        self.inner = inner
        self.reader = reader

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
            while (left := deadline - time.monotonic()) > 0 and await asyncio.wait_for(self.reader.read(1 << 16),
                                                                                        left):
                pass
        self.inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _Watched:
    """A client connection's reader (wraps mitmproxy's) noting when the request being read began."""

    __slots__ = ("busy", "expired", "fmt", "inner", "started", "writer")

    def __init__(self, inner: Any, writer: Any) -> None:
        self.inner = inner
        self.writer = writer
        self.started: float | None = time.monotonic()  # a new connection owes its first request
        self.busy = False  # a whole request was read, its answer is not done yet
        self.fmt: str | None = None
        self.expired = False  # answered 408: what the client still sends is dropped (mitmproxy reads an end)

    async def read(self, n: int = -1) -> bytes:
        data = bytes(await self.inner.read(n))
        if self.expired:
            return b""
        if data and self.started is None:
            self.started = time.monotonic()
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class ClientDeadlines:
    """Slow-loris guard over every client connection (see the module's docstring)."""

    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self.conns: dict[str, _Watched] = {}
        self.expired = 0

    def connected(self, client_id: str, handler: Any) -> None:
        """Wrap the connection's reader (``client_connected``: before mitmproxy reads from it)."""
        io = handler.transports.get(handler.client) if handler is not None else None
        if io is None or io.reader is None or io.writer is None or not hasattr(io.writer, "write"):
            return
        watched = _Watched(io.reader, io.writer)
        io.reader = watched
        io.writer = _Lingering(io.writer, io.reader.inner)
        self.conns[client_id] = watched

    def disconnected(self, client_id: str) -> None:
        self.conns.pop(client_id, None)

    def headers(self, client_id: str, fmt: str) -> None:
        """A request's headers arrived: its error shape is known."""
        if (watched := self.conns.get(client_id)) is not None:
            watched.fmt = fmt

    def read(self, client_id: str) -> None:
        """A request arrived whole: no client deadline until it is answered."""
        if (watched := self.conns.get(client_id)) is not None:
            watched.busy, watched.started = True, None

    def answered(self, client_id: str) -> None:
        """Its answer is done: the next request's deadline starts with its first byte."""
        if (watched := self.conns.get(client_id)) is not None:
            watched.busy, watched.started, watched.fmt = False, None, None

    async def watch(self) -> None:
        """Expire slow requests (a few checks per timeout)."""
        while True:
            await asyncio.sleep(min(1.0, max(0.1, self.timeout / 4)))
            now = time.monotonic()
            for client_id, watched in list(self.conns.items()):
                if not watched.busy and watched.started is not None and now - watched.started > self.timeout:
                    self._expire(client_id, watched)

    def _expire(self, client_id: str, watched: _Watched) -> None:
        self.conns.pop(client_id, None)
        self.expired += 1
        body = error_body(watched.fmt, 408, f"the request did not arrive whole within {self.timeout:g}s "
                                            "(headers and body); the connection is closed", "request_timeout")
        head = (f"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
                "connection: close\r\n\r\n").encode()
        watched.expired = True
        with contextlib.suppress(Exception):  # the peer may be gone already
            watched.writer.write(head + body)
            watched.writer.write_eof()  # the client reads the 408, then the end (a close now could reset it)
        asyncio.get_running_loop().call_later(LINGER_S, watched.writer.close)
