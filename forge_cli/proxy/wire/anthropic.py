"""Anthropic Messages, served by translation to Chat Completions.

vLLM's own ``/v1/messages`` returns no token ids, so the proxy rewrites each Messages request into a
Chat Completions request (where token ids and logprobs are available), and translates the answer back:
JSON to a ``message`` object, SSE chunks to ``message_start`` … ``message_stop`` events.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from forge_cli.proxy.wire import chat, sse
from forge_cli.proxy.wire.base import (
    Assembled,
    BadRequest,
    Limits,
    Prepared,
    WireFormat,
    anthropic_error,
    chat_answer,
    chat_call,
    load_object,
    register_wire_format,
    translate_answer,
    unwrap_arguments,
)
from forge_cli.proxy.wire.decode import TranslatedStream

BILLING_PREFIX = "x-anthropic-billing-header:"
_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "abort": "end_turn"}
_FINISH = {"max_tokens": "length", "tool_use": "tool_calls"}  # _STOP inverted (end_turn: stop)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for block in content or ():
        if isinstance(block, dict) and block.get("type") == "text":
            text = str(block.get("text", ""))
            if not text.startswith(BILLING_PREFIX):
                parts.append(text)
    return "\n\n".join(parts)


def _user_blocks(content: Any, out: list[dict[str, Any]]) -> None:
    """A user turn: tool results become ``tool`` messages, the rest one user message."""
    if isinstance(content, str):
        out.append({"role": "user", "content": content})
        return
    parts: list[dict[str, Any]] = []
    for block in content or ():
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "tool_result":
            result = block.get("content")
            text = _text_of(result) if not isinstance(result, str) else result
            if block.get("is_error"):
                text = f"[error] {text}"
            out.append({"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": text})
        elif kind == "text":
            parts.append({"type": "text", "text": block.get("text", "")})
        elif kind == "image" and isinstance(block.get("source"), dict) and block["source"].get("type") == "base64":
            src = block["source"]
            parts.append({"type": "image_url",
                          "image_url": {"url": f"data:{src.get('media_type')};base64,{src.get('data')}"}})
    if parts:
        if all(p["type"] == "text" for p in parts):
            out.append({"role": "user", "content": "\n\n".join(p["text"] for p in parts)})
        else:
            out.append({"role": "user", "content": parts})


def _assistant_blocks(content: Any, out: list[dict[str, Any]]) -> None:
    if isinstance(content, str):
        out.append({"role": "assistant", "content": content})
        return
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in content or ():
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "tool_use":
            arguments = unwrap_arguments(block.get("input") or {})  # {"_raw": text}: the policy's own text again
            calls.append({"id": block.get("id"), "type": "function",
                          "function": {"name": block.get("name"), "arguments": arguments}})
        # thinking / redacted_thinking blocks are not part of what the policy model is trained on
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if calls:
        message["tool_calls"] = calls
    out.append(message)


def to_chat(obj: dict[str, Any]) -> dict[str, Any]:
    """A Messages request as a Chat Completions request (thinking, cache_control, billing header dropped)."""
    messages: list[dict[str, Any]] = []
    system = _text_of(obj.get("system"))
    if system:
        messages.append({"role": "system", "content": system})
    for msg in obj.get("messages") or ():
        if not isinstance(msg, dict):
            raise BadRequest("each message must be an object")
        role = msg.get("role")
        if role == "system":
            text = _text_of(msg.get("content"))
            if text:
                messages.append({"role": "system", "content": text})
        elif role == "assistant":
            _assistant_blocks(msg.get("content"), messages)
        elif role == "user":
            _user_blocks(msg.get("content"), messages)
        else:
            raise BadRequest(f"unknown message role {role!r}")
    out: dict[str, Any] = {"model": obj.get("model"), "messages": messages}
    if "max_tokens" in obj:
        out["max_tokens"] = obj["max_tokens"]
    for src, dst in (("temperature", "temperature"), ("top_p", "top_p"), ("top_k", "top_k"),
                     ("stop_sequences", "stop")):
        if obj.get(src) is not None:
            out[dst] = obj[src]
    tools = [t for t in obj.get("tools") or () if isinstance(t, dict) and "input_schema" in t]
    if tools:
        out["tools"] = [
            {"type": "function", "function": {"name": t.get("name"), "description": t.get("description", ""),
                                              "parameters": t.get("input_schema") or {}}}
            for t in tools
        ]
        choice = obj.get("tool_choice") or {}
        kind = choice.get("type") if isinstance(choice, dict) else None
        if kind == "any":
            out["tool_choice"] = "required"
        elif kind == "tool":
            out["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
        elif kind == "none":
            out["tool_choice"] = "none"
        else:
            out["tool_choice"] = "auto"
    if obj.get("stream"):
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return out


def prepare(body: bytes, limits: Limits, path: str = "") -> Prepared:
    """Translate to Chat Completions with token capture; the client never sees the capture fields."""
    obj = load_object(body)
    if not isinstance(obj.get("messages"), list):
        raise BadRequest("messages: field required (a list)")
    prep = chat.prepare_object(to_chat(obj), limits)
    prep.wants_logprobs = prep.wants_token_ids = False
    return prep


def _message_id(chat_id: Any) -> str:
    return "msg_" + (str(chat_id).removeprefix("chatcmpl-") if chat_id else uuid.uuid4().hex)


def _usage(usage: Any) -> dict[str, int]:
    usage = usage if isinstance(usage, dict) else {}
    return {"input_tokens": int(usage.get("prompt_tokens") or 0),
            "output_tokens": int(usage.get("completion_tokens") or 0)}


def to_message(completion: dict[str, Any]) -> dict[str, Any]:
    """A ``chat.completion`` object as an Anthropic ``message``."""
    choice = (completion.get("choices") or [{}])[0]
    msg = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    if msg.get("content"):
        content.append({"type": "text", "text": msg["content"]})
    for call in msg.get("tool_calls") or ():
        fn = call.get("function") or {}
        try:
            args = json.loads(fn.get("arguments") or "{}")
        except ValueError:
            args = {"_raw": fn.get("arguments")}
        content.append({"type": "tool_use", "id": call.get("id") or f"toolu_{uuid.uuid4().hex[:24]}",
                        "name": fn.get("name"), "input": args})
    return {"id": _message_id(completion.get("id")), "type": "message", "role": "assistant",
            "model": completion.get("model"), "content": content,
            "stop_reason": _STOP.get(choice.get("finish_reason") or "stop", "end_turn"), "stop_sequence": None,
            "usage": _usage(completion.get("usage"))}


def upstream_answer(response: Any) -> dict[str, Any]:
    """The chat completion a recorded ``message`` was translated from (``to_message`` inverted; it drops reasoning
    and ``created``: there is none to give back, ``created`` is 0)."""
    if not (isinstance(response, dict) and response.get("type") == "message"
            and isinstance(response.get("content"), list)):
        raise ValueError("not an Anthropic message")
    blocks = [b for b in response["content"] if isinstance(b, dict)]
    calls = [chat_call(b.get("id"), b.get("name"), unwrap_arguments(b.get("input")))
             for b in blocks if b.get("type") == "tool_use"]
    text = "".join(str(b.get("text") or "") for b in blocks if b.get("type") == "text")
    finish = _FINISH.get(str(response.get("stop_reason")), "stop")
    return chat_answer("chatcmpl-" + str(response.get("id") or "").removeprefix("msg_"), 0, response.get("model"),
                       text, finish, calls)


def client_body(upstream: bytes, prep: Prepared) -> bytes:
    """A non-streamed chat answer as a Messages answer (errors in Anthropic's shape)."""
    return translate_answer(upstream, lambda obj: to_message(obj))


class ClientStream(TranslatedStream):
    """Chat Completion chunks in, Anthropic Messages events out, block by block."""

    __slots__ = ("_block", "_block_kind", "_tool_index")

    def __init__(self, prep: Prepared) -> None:
        super().__init__()
        self._block = -1
        self._block_kind: str | None = None
        self._tool_index: int | None = None

    def fail(self, message: str) -> bytes:
        """The event that ends the stream in error (the upstream's stream broke off)."""
        return b"event: error\ndata: " + anthropic_error(502, message, "upstream_error") + b"\n\n"

    def _open(self, kind: str, block: dict[str, Any]) -> list[bytes]:
        out = self._close()
        self._block += 1
        self._block_kind = kind
        out.append(sse.encode({"type": "content_block_start", "index": self._block, "content_block": block},
                              "content_block_start"))
        return out

    def _close(self) -> list[bytes]:
        if self._block_kind is None:
            return []
        self._block_kind = None
        return [sse.encode({"type": "content_block_stop", "index": self._block}, "content_block_stop")]

    def _event(self, chunk: dict[str, Any], out: list[bytes]) -> None:
        out.extend(self._translate(chunk))

    def _end(self, out: list[bytes]) -> None:
        out.extend(self._finish())

    def _translate(self, chunk: dict[str, Any]) -> list[bytes]:
        if chunk.get("error"):  # vLLM reports a failure mid-stream as an error chunk before [DONE]
            self.done = True
            error = chunk["error"] if isinstance(chunk["error"], dict) else {"message": str(chunk["error"])}
            return [b"event: error\ndata: " + anthropic_error(500, str(error.get("message") or "stream failed"),
                                                              "upstream_error") + b"\n\n"]
        out: list[bytes] = []
        if not self._chat.started:
            message: dict[str, Any] = {
                "id": _message_id(chunk.get("id")), "type": "message", "role": "assistant", "model": chunk.get("model"),
                "content": [], "stop_reason": None, "stop_sequence": None,
                "usage": {"input_tokens": len(chunk.get("prompt_token_ids") or ()), "output_tokens": 0},
            }
            out.append(sse.encode({"type": "message_start", "message": message}, "message_start"))
        for delta in self._chat.absorb(chunk):
            if delta.content:
                if self._block_kind != "text":
                    out += self._open("text", {"type": "text", "text": ""})
                out.append(sse.encode({"type": "content_block_delta", "index": self._block,
                                       "delta": {"type": "text_delta", "text": delta.content}},
                                      "content_block_delta"))
            for call in delta.tool_calls:
                fn = call.get("function") or {}
                index = call.get("index", 0)
                if self._block_kind != "tool_use" or index != self._tool_index:
                    self._tool_index = index
                    out += self._open("tool_use", {"type": "tool_use", "id": call.get("id") or f"toolu_{index}",
                                                   "name": fn.get("name") or "", "input": {}})
                if fn.get("arguments"):
                    out.append(sse.encode({"type": "content_block_delta", "index": self._block,
                                           "delta": {"type": "input_json_delta", "partial_json": fn["arguments"]}},
                                          "content_block_delta"))
        return out

    def _finish(self) -> list[bytes]:
        if self.done:
            return []
        self.done = True
        out = self._close()
        usage = _usage(self._chat.usage)
        stop = _STOP.get(self._chat.finish_reason, "end_turn") if self._chat.finish_reason else "end_turn"
        out.append(sse.encode({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                               "usage": {"output_tokens": usage["output_tokens"]}}, "message_delta"))
        out.append(sse.encode({"type": "message_stop"}, "message_stop"))
        return out


def assemble(upstream: bytes, streamed: bool, prep: Prepared) -> Assembled:
    """The Messages answer the client got, with the chat upstream's token ids and logprobs."""
    result = chat.assemble(upstream, streamed, prep)
    if isinstance(result.response, dict) and "choices" in result.response:
        result.response = to_message(result.response)
    return result


FORMAT = register_wire_format(WireFormat(
    name="anthropic", paths=("/v1/messages", "/messages"), prepare=prepare, client_body=client_body,
    client_stream=ClientStream, assemble=assemble, error=anthropic_error, reshapes_errors=True,
    upstream_answer=upstream_answer))
