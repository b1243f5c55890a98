"""Server-sent events: split a byte stream into events and write events back."""

from __future__ import annotations

import json
from typing import Any


class SSESplitter:
    """Accumulates chunks and yields complete events (the raw bytes between blank lines)."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        """Complete events in ``chunk`` (plus what was held back); an incomplete tail is kept."""
        buf = self._buf + chunk if self._buf else chunk
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        parts = buf.split(b"\n\n")
        self._buf = parts.pop()
        return [p for p in parts if p.strip()]

    def flush(self) -> list[bytes]:
        """Whatever is left at the end of the stream (a final event without its blank line)."""
        rest, self._buf = self._buf, b""
        return [rest] if rest.strip() else []


def parse_event(raw: bytes) -> tuple[str | None, bytes]:
    """(event name, data) of one raw event; multi-line data is joined with newlines."""
    name: str | None = None
    data: list[bytes] = []
    for line in raw.split(b"\n"):
        if line.startswith(b"data:"):
            data.append(line[5:].lstrip(b" ") if line[5:6] == b" " else line[5:])
        elif line.startswith(b"event:"):
            name = line[6:].strip().decode("utf-8", "replace")
    return name, b"\n".join(data)


def event_json(raw: bytes) -> tuple[str | None, Any]:
    """(event name, parsed data) or (name, None) when the data is not JSON (e.g. ``[DONE]``)."""
    name, data = parse_event(raw)
    if not data or data == b"[DONE]":
        return name, None
    try:
        return name, json.loads(data)
    except ValueError:
        return name, None


def encode(data: Any, event: str | None = None) -> bytes:
    """One SSE event (``event:`` line when named) with compact JSON data."""
    body = b"data: " + json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"
    return b"event: " + event.encode() + b"\n" + body if event else body


def iter_events(stream: bytes) -> list[bytes]:
    """All events of a complete SSE body."""
    splitter = SSESplitter()
    return splitter.feed(stream) + splitter.flush()
