"""What the proxy answers when peers misbehave: error shapes, broken upstream answers (slow clients and connections:
``transport.py``).

* ``error_body``: an error in a wire format's shape.
* ``answer_problem``: why an upstream's non-error answer cannot be served (a status other than 200, not JSON,
  not a chat completion), checked without parsing the body.
* ``streamer``: a call's SSE answer through its format's ``ClientStream``; a broken-off upstream stream (truncated,
  unreadable, stalled) ends the client's stream in its format's error event (``ClientStream.fail``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from forge_cli.proxy.wire import FORMATS
from forge_cli.proxy.wire.base import openai_error

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
