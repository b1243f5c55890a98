"""A recorded call as the Chat Completions exchange its upstream served, whatever the client's wire format.

The proxy forwards every call upstream as Chat Completions (a Responses, Anthropic Messages or Gemini request is
translated; the forwarded body is ``CallRecord.upstream_request`` when it differs from the client's). Its record keeps
the answer in the client's wire format; the format's ``upstream_answer`` turns it back into the Chat Completions answer
it was translated from. Prefix replay (``forge_cli.replay``) and SFT rendering (``forge_cli.train.sft``) read calls
this way, so a Codex or Claude Code record becomes a sample or a replayed answer exactly as a pi record does.
"""

from __future__ import annotations

from typing import Any

from forge_cli.proxy.wire.registry import FORMATS
from forge_cli.traces.record import CallRecord


class NoExchange(ValueError):
    """The record cannot be read as a Chat Completions exchange; the message says why (for the caller's error)."""


def chat_request(record: CallRecord) -> dict[str, Any]:
    """The Chat Completions request the proxy forwarded for ``record`` (``{}`` when it recorded none)."""
    body = record.upstream_request if record.upstream_request is not None else record.request
    return body if isinstance(body, dict) else {}


def chat_answer(record: CallRecord) -> dict[str, Any]:
    """The Chat Completions answer (``{"choices": [{"message": ...}], ...}``, no capture fields) the upstream gave for
    ``record``: the recorded answer itself for a Chat call, its format's ``upstream_answer`` for any other.
    ``NoExchange`` for a format without that inverse or an answer it cannot invert (a failed or unfinished one)."""
    fmt = FORMATS.get(record.wire_format)
    inverse = getattr(fmt, "upstream_answer", None) if fmt is not None else None
    if inverse is None:
        raise NoExchange(f"wire format {record.wire_format!r} has no upstream_answer (its WireFormat cannot turn a "
                         "recorded answer back into the upstream's)")
    try:
        answer = inverse(record.response)
    except ValueError as exc:
        raise NoExchange(f"its recorded answer cannot be turned back into the upstream's: {exc}") from None
    return answer  # type: ignore[no-any-return,unused-ignore]
