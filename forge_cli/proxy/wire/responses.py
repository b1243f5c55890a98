"""OpenAI Responses API: passed through to the upstream's ``/v1/responses`` with token capture switched on.

vLLM returns raw prompt/output token ids with ``enable_response_messages`` (``input_messages`` /
``output_messages``) and logprobs with ``include: ["message.output_text.logprobs"]``, streamed or not
(the streamed ``response.completed`` event carries the full response).
"""

from __future__ import annotations

import json
from typing import Any

from forge_cli.proxy.wire import sse
from forge_cli.proxy.wire.base import Assembled, Limits, Prepared, clamp, dumps, load_object, logprob

LOGPROBS_INCLUDE = "message.output_text.logprobs"
# what vLLM's ResponsesRequest accepts in ``include``; anything else is dropped
_UPSTREAM_INCLUDES = {
    "code_interpreter_call.outputs", "computer_call_output.output.image_url", "file_search_call.results",
    "message.input_image.image_url", LOGPROBS_INCLUDE, "reasoning.encrypted_content",
}
TERMINAL_EVENTS = {"response.completed", "response.incomplete", "response.failed", "error"}


def prepare(body: bytes, limits: Limits) -> Prepared:
    """Switch on token capture, drop tool types and includes the upstream rejects, clamp output tokens."""
    obj = load_object(body)
    include = obj.get("include") or []
    wants_logprobs = LOGPROBS_INCLUDE in include
    wants_ids = bool(obj.get("enable_response_messages"))
    obj["include"] = [i for i in include if i in _UPSTREAM_INCLUDES and i != LOGPROBS_INCLUDE] + [LOGPROBS_INCLUDE]
    obj["enable_response_messages"] = True
    if obj.get("top_logprobs") is None:
        obj["top_logprobs"] = 0
    if isinstance(obj.get("tools"), list):
        obj["tools"] = [t for t in obj["tools"] if isinstance(t, dict) and t.get("type") == "function"]
        if not obj["tools"]:
            obj.pop("tools")
            obj.pop("tool_choice", None)
    if "max_output_tokens" in obj:
        obj["max_output_tokens"] = clamp(obj["max_output_tokens"], limits.max_output_tokens)
    elif limits.max_output_tokens > 0:
        obj["max_output_tokens"] = limits.max_output_tokens
    if limits.model:
        obj["model"] = limits.model
    # vLLM cannot run these in the background or keep them; the record is forge's store
    obj.pop("background", None)
    return Prepared(body=dumps(obj), changed=True, rewritten=True, wants_token_ids=wants_ids,
                    wants_logprobs=wants_logprobs,
                    stream=bool(obj.get("stream")), model=obj.get("model"))


def _strip_parts(items: Any) -> None:
    for item in items or ():
        if isinstance(item, dict):
            for part in item.get("content") or ():
                if isinstance(part, dict) and "logprobs" in part:
                    part["logprobs"] = []


def strip_capture(obj: dict[str, Any], prep: Prepared) -> None:
    """Remove capture fields the client did not ask for from a response object or stream event."""
    inner = obj.get("response")
    response: dict[str, Any] = inner if isinstance(inner, dict) else obj
    if not prep.wants_token_ids:
        response.pop("input_messages", None)
        response.pop("output_messages", None)
    if not prep.wants_logprobs:
        _strip_parts(response.get("output"))
        if "logprobs" in obj:
            obj["logprobs"] = []
        for key in ("item", "part"):
            if isinstance(obj.get(key), dict):
                _strip_parts([obj[key]] if key == "item" else [{"content": [obj[key]]}])


def client_body(upstream: bytes, prep: Prepared) -> bytes:
    """A non-streamed answer as the client should see it."""
    try:
        obj = json.loads(upstream)
    except ValueError:
        return upstream
    if not isinstance(obj, dict) or "output" not in obj:
        return upstream
    strip_capture(obj, prep)
    return dumps(obj)


class ClientStream:
    """Per-call SSE transformer for Responses events."""

    __slots__ = ("_prep", "_split", "done")

    def __init__(self, prep: Prepared) -> None:
        self._prep = prep
        self._split = sse.SSESplitter()
        self.done = False

    def feed(self, chunk: bytes) -> bytes:
        events = self._split.feed(chunk) if chunk else self._split.flush()
        return b"".join([self._event(e) for e in events])

    def _event(self, raw: bytes) -> bytes:
        name, obj = sse.event_json(raw)
        kind = name or (obj.get("type") if isinstance(obj, dict) else None)
        if kind in TERMINAL_EVENTS:
            self.done = True
        if isinstance(obj, dict) and (b"logprobs" in raw or b"_messages" in raw):
            strip_capture(obj, self._prep)
            return sse.encode(obj, name)
        return raw + b"\n\n"


def extract(response: dict[str, Any]) -> Assembled:
    """Token ids from ``input_messages``/``output_messages``, logprobs from the output text parts."""
    prompt = [t for m in response.get("input_messages") or () for t in (m.get("tokens") or ())]
    completion = [t for m in response.get("output_messages") or () for t in (m.get("tokens") or ())]
    logprobs = [
        logprob(lp)
        for item in response.get("output") or ()
        if isinstance(item, dict)
        for part in item.get("content") or ()
        if isinstance(part, dict)
        for lp in part.get("logprobs") or ()
    ]
    status = response.get("status")
    finish = {"completed": "stop", "incomplete": "length"}.get(status or "", status)
    if any(isinstance(i, dict) and i.get("type") == "function_call" for i in response.get("output") or ()):
        finish = "tool_calls"
    result = Assembled(
        response=response,
        prompt_token_ids=prompt or None,
        completion_token_ids=completion or None,
        completion_logprobs=logprobs,
        finish_reason=finish,
    )
    result.extra["usage"] = response.get("usage")
    return result


def assemble(upstream: bytes, streamed: bool, prep: Prepared) -> Assembled:
    """The final response object (from the terminal event when streamed) and its captured tokens."""
    if not streamed:
        obj = json.loads(upstream)
        result = extract(obj)
        strip_capture(obj, prep)
        result.response = obj
        return result
    final: dict[str, Any] | None = None
    last: dict[str, Any] | None = None
    text: list[str] = []
    for raw in sse.iter_events(upstream):
        name, obj = sse.event_json(raw)
        if not isinstance(obj, dict):
            continue
        kind = name or obj.get("type")
        if isinstance(obj.get("response"), dict):
            last = obj["response"]
        if kind == "response.output_text.delta":
            text.append(str(obj.get("delta") or ""))
        if kind in TERMINAL_EVENTS:
            final = obj.get("response") if isinstance(obj.get("response"), dict) else obj
    if final is None:
        partial = dict(last or {})
        partial["output_text"] = "".join(text)
        result = Assembled(response=partial, complete=False, finish_reason=None)
        return result
    result = extract(final)
    strip_capture(final, prep)
    result.response = final
    return result
