"""What every wire format shares: request facts, the assembled result, client-facing errors."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from forge_cli.plugins import Registry


class BadRequest(Exception):
    """The client's request cannot be served as sent (answered with a 4xx, never forwarded)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


@dataclass(slots=True)
class Limits:
    """Request rewriting settings: ``max_output_tokens`` caps the client's output limit (0: no cap); ``sampling``
    (e.g. ``{"temperature": 0.3}``) replaces the client's sampling parameters on every call (empty: pass through);
    ``capture`` asks the upstream for token ids and logprobs."""

    max_output_tokens: int = 0
    model: str = ""
    sampling: dict[str, Any] = field(default_factory=dict)
    # ask the upstream for token ids and logprobs (vLLM's return_token_ids / logprobs); off for an external API
    # that rejects fields it does not know (its records then hold the messages and the answer, no ids)
    capture: bool = True


@dataclass(slots=True)
class Prepared:
    """A request rewritten for the upstream, with what the client asked for."""

    body: bytes
    changed: bool
    rewritten: bool = False  # changed beyond the capture fields (translation, clamp, model, normalisation)
    wants_token_ids: bool = False
    wants_logprobs: bool = False
    stream: bool | None = None
    model: str | None = None
    # flat Chat tool name -> (namespace, name) for tools the client grouped in namespaces (Responses API)
    namespaced: dict[str, tuple[str, str]] | None = None


@dataclass(slots=True)
class Assembled:
    """A complete response for the record: the client's view plus what training needs."""

    response: Any
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    completion_logprobs: list[float] | None = None
    finish_reason: str | None = None
    complete: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


def dumps(obj: Any) -> bytes:
    """Compact JSON bytes."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def translate_answer(upstream: bytes, translate: Callable[[dict[str, Any]], dict[str, Any]]) -> bytes:
    """A non-streamed Chat Completions answer through ``translate`` into another wire format's answer; anything
    else (an error body, invalid JSON) unchanged."""
    try:
        obj = json.loads(upstream)
    except ValueError:
        return upstream
    if isinstance(obj, dict) and "choices" in obj:
        return dumps(translate(obj))
    return upstream


def chat_answer(chat_id: str, created: Any, model: Any, text: str, finish_reason: str,
                calls: list[dict[str, Any]] | None = None, reasoning: str = "") -> dict[str, Any]:
    """A non-streamed Chat Completions answer without capture fields or usage, what a format's ``upstream_answer``
    returns: ``content`` is ``None`` when the answer is only tool calls (as vLLM sends it)."""
    message: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = calls
    return {"id": chat_id, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}]}


def chat_call(call_id: Any, name: Any, arguments: str) -> dict[str, Any]:
    """One Chat Completions tool call."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def unwrap_arguments(args: Any, wrapped: str | None = None) -> str:
    """The Chat arguments string of a tool call's parsed arguments: the JSON text, or the text itself where the
    forward translation kept unparsable arguments as ``{"_raw": text}`` (or ``wrapped`` names the key of a wrapper
    it put around arguments that are not a JSON object: Gemini's ``{"value": ...}``). A wrapper is only undone where
    the forward translation could have added it, so the result translates to ``args`` again."""
    if isinstance(args, dict) and len(args) == 1:
        (key, value), = args.items()
        if key == "_raw" and isinstance(value, str):
            try:
                json.loads(value)
            except ValueError:
                return value
        elif key == wrapped and not isinstance(value, dict):
            return json.dumps(value, ensure_ascii=False)
    return json.dumps(args, ensure_ascii=False)


def load_object(body: bytes) -> dict[str, Any]:
    """The request body as a JSON object, or ``BadRequest``."""
    try:
        obj = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise BadRequest("request body must be a JSON object")
    return obj


def clamp(value: Any, cap: int) -> Any:
    """``value`` capped at ``cap`` when both are positive integers."""
    if cap > 0 and isinstance(value, int) and not isinstance(value, bool) and value > cap:
        return cap
    return value


def openai_error(status: int, message: str, kind: str) -> bytes:
    """OpenAI's error shape (Chat Completions and Responses)."""
    return dumps({"error": {"message": message, "type": kind, "param": None, "code": status}})


def anthropic_error(status: int, message: str, kind: str) -> bytes:
    """Anthropic's error shape."""
    names = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
             404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 529: "overloaded_error"}
    return dumps({"type": "error", "error": {"type": names.get(status, "api_error"), "message": f"{kind}: {message}"}})


_GOOGLE_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                  409: "ABORTED", 429: "RESOURCE_EXHAUSTED", 499: "CANCELLED", 500: "INTERNAL", 501: "UNIMPLEMENTED",
                  503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}


def gemini_error(status: int, message: str, kind: str) -> bytes:
    """Google's error shape (Gemini API): ``{"error": {"code", "message", "status"}}``."""
    name = _GOOGLE_STATUS.get(status, "INVALID_ARGUMENT" if status < 500 else "INTERNAL")
    return dumps({"error": {"code": status, "message": f"{kind}: {message}", "status": name}})


def logprob(entry: dict[str, Any]) -> float:
    """A sampled token's logprob; vLLM sends ``null`` where the value is not finite (NaN): kept as NaN so the
    call keeps its token ids instead of failing to parse."""
    value = entry.get("logprob", 0.0)
    return float("nan") if value is None else float(value)


class ClientStream(Protocol):
    """A call's upstream Chat Completions SSE stream turned, chunk by chunk, into the client's stream."""

    done: bool  # the stream's terminal event went through (what follows is dropped)

    def feed(self, chunk: bytes) -> bytes:
        """The client's bytes for ``chunk`` of the upstream's stream; ``b""`` (its end) flushes what is held."""
        ...

    def fail(self, message: str) -> bytes:
        """The event(s) that end the client's stream in error, in its format's shape (the upstream's stream broke
        off: truncated, unreadable, stalled)."""
        ...


@dataclass(frozen=True, slots=True)
class WireFormat:
    """One wire format the proxy serves, registered in ``forge_cli.proxy.wire.registry.FORMATS`` (the addon and the
    store writer look formats up there, by the name records carry in ``wire_format``).

    Every format is served from the upstream's Chat Completions endpoint (``upstream_path``): ``prepare`` rewrites
    the client's request into a Chat Completions request that asks for token ids and logprobs (``BadRequest`` for
    one that cannot be served); ``client_body`` turns a non-streamed upstream answer into the client's answer,
    ``client_stream`` makes the per-call transformer of a streamed one; ``assemble`` (in the writer process) turns
    the upstream's bytes into the record: the client's view plus token ids, logprobs and finish reason; ``error``
    is the format's error body. A new format is one module ending in ``FORMAT = register_wire_format(WireFormat(...))``
    (forge's own in this package are found where they live; a package's through the entry-point group
    ``forge.wire_formats``, installed where the proxy runs); ``forge_cli.testing.wire`` is its conformance kit.

    ``upstream_answer`` inverts ``client_body`` for prefix replay, whose server stands where the upstream stands and
    answers recorded calls: given a recorded client answer (``CallRecord.response``: the parsed JSON object of a
    non-streamed answer, or of a streamed one as assembled), it returns the Chat Completions answer it was
    translated from, ``{"id", "object": "chat.completion", "created", "model", "choices": [{"index": 0, "message":
    {"role": "assistant", "content": str | None, "reasoning_content"?, "tool_calls"?: [{"id", "type": "function",
    "function": {"name", "arguments": <JSON string>}}]}, "finish_reason"}]}``, with no capture fields (token ids,
    prompt token ids, logprobs) and no usage; ``ValueError`` for an object that is no such answer (an error body).
    With the recording's capture fields and usage put back, ``client_body`` turns it into the recorded answer
    again, exactly. ``None``: calls in this format cannot be replayed.
    """

    name: str
    paths: tuple[str, ...]  # client paths served (after ``/r/<id>``, no query, no trailing slash)
    prepare: Callable[[bytes, Limits, str], Prepared]  # (body, limits, client path with query) -> upstream request
    client_body: Callable[[bytes, Prepared], bytes]
    client_stream: Callable[[Prepared], ClientStream]
    assemble: Callable[[bytes, bool, Prepared], Assembled]  # (upstream bytes, streamed, prep) -> the record's part
    error: Callable[[int, str, str], bytes]  # (status, message, kind) -> error body
    reshapes_errors: bool  # upstream error bodies always rewritten into ``error``'s shape (they are OpenAI's)
    matches: Callable[[str], bool] | None = None  # client paths served beyond ``paths`` (Gemini's model paths)
    upstream_path: str = "/v1/chat/completions"
    upstream_answer: Callable[[Any], dict[str, Any]] | None = None  # client answer -> the Chat answer (replay)


# every wire format by name, the name records carry in ``wire_format`` (``registry.FORMATS`` reads it)
WIRE_FORMATS: Registry[WireFormat] = Registry("wire format", WireFormat, "forge.wire_formats", own="proxy/wire/*.py",
                                              instances=True)


def register_wire_format(fmt: WireFormat) -> WireFormat:
    """Register ``fmt`` under its name (a module's ``FORMAT = register_wire_format(WireFormat(...))``)."""
    WIRE_FORMATS.add(fmt.name, fmt)
    return fmt
