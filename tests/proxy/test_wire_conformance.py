"""Wire conformance: every registered ``WireFormat`` (``wire.FORMATS``) does the same things the same way, through the
registry alone: requests with tools become capture-enabled Chat Completions requests, answers (JSON and streams,
text and tool calls) reach the client in its format and the record keeps every token id with one logprob each,
errors come in the format's shape, broken requests and streams are refused or ended in error."""

from __future__ import annotations

import json
from typing import Any

import pytest

from forge_cli.proxy import writer
from forge_cli.proxy.wire import FORMATS, route, sse
from forge_cli.proxy.wire.base import BadRequest, Limits, Prepared, WireFormat
from forge_cli.traces import store

PROMPT = [1, 2, 3]
TOKENS = [10, 11, 12, 13, 14]
TOOL = {"name": "get_weather", "description": "weather", "parameters": {"type": "object",
                                                                         "properties": {"city": {"type": "string"}}}}


def _request(name: str, stream: bool) -> tuple[str, dict[str, Any]]:
    """(client path, body) of a call with one user turn, one tool and an output limit, in the format's terms."""
    if name == "chat":
        return "/v1/chat/completions", {"model": "m", "stream": stream, "max_tokens": 64,
                                        "messages": [{"role": "user", "content": "hi"}],
                                        "tools": [{"type": "function", "function": TOOL}]}
    if name == "responses":
        return "/v1/responses", {"model": "m", "stream": stream, "max_output_tokens": 64, "input": "hi",
                                 "tools": [{"type": "function", **TOOL}]}
    if name == "anthropic":
        return "/v1/messages", {"model": "m", "stream": stream, "max_tokens": 64,
                                "messages": [{"role": "user", "content": "hi"}],
                                "tools": [{"name": TOOL["name"], "description": TOOL["description"],
                                           "input_schema": TOOL["parameters"]}]}
    assert name == "gemini"
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    return f"/v1beta/models/m:{method}", {"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
                                          "generationConfig": {"maxOutputTokens": 64},
                                          "tools": [{"functionDeclarations": [TOOL]}]}


def _entries(tokens: list[int]) -> list[dict[str, Any]]:
    return [{"token": f"t{t}", "logprob": -0.5, "bytes": [], "top_logprobs": []} for t in tokens]


def _completion(tool: bool) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": None if tool else "Hello there"}
    if tool:
        message["tool_calls"] = [{"id": "call_1", "type": "function",
                                  "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]
    return {"id": "chatcmpl-x", "object": "chat.completion", "created": 1, "model": "m", "prompt_token_ids": PROMPT,
            "choices": [{"index": 0, "message": message, "token_ids": TOKENS,
                         "logprobs": {"content": _entries(TOKENS)}, "finish_reason": "tool_calls" if tool else "stop"}],
            "usage": {"prompt_tokens": len(PROMPT), "completion_tokens": len(TOKENS)}}


def _stream(tool: bool, done: bool = True) -> bytes:
    """The upstream's SSE answer: text in pieces (or a tool call's arguments in pieces), one token a chunk."""
    head = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    chunks: list[dict[str, Any]] = [{**head, "prompt_token_ids": PROMPT, "choices": [
        {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}]
    for i, token in enumerate(TOKENS):
        if tool:
            call: dict[str, Any] = {"index": 0, "function": {"arguments": '{"city"' if i == 1 else ""}}
            if i == 0:
                call.update(id="call_1", type="function", function={"name": "get_weather", "arguments": ""})
            elif i >= 2:
                call["function"]["arguments"] = (': "Par', 'is"', "}")[i - 2]
            delta: dict[str, Any] = {"tool_calls": [call]}
        else:
            delta = {"content": ("Hel", "lo", " the", "re", "")[i]}
        last = i == len(TOKENS) - 1
        chunks.append({**head, "choices": [{"index": 0, "delta": delta, "token_ids": [token],
                                            "logprobs": {"content": _entries([token])},
                                            "finish_reason": ("tool_calls" if tool else "stop") if last else None}]})
    chunks.append({**head, "choices": [], "usage": {"prompt_tokens": len(PROMPT), "completion_tokens": len(TOKENS)}})
    raw = b"".join(sse.encode(c) for c in chunks)
    return raw + b"data: [DONE]\n\n" if done else raw


def _prepare(fmt: WireFormat, stream: bool) -> Prepared:
    path, body = _request(fmt.name, stream)
    found = route(path)
    assert found is fmt, f"{path} is not routed to {fmt.name}"
    return fmt.prepare(json.dumps(body).encode(), Limits(max_output_tokens=4096), path)


FORMAT_NAMES = sorted(FORMATS)


def test_registry_names_every_format() -> None:
    assert FORMAT_NAMES == ["anthropic", "chat", "gemini", "responses"]
    assert all(name == fmt.name for name, fmt in FORMATS.items())


@pytest.mark.parametrize("name", FORMAT_NAMES)
@pytest.mark.parametrize("stream", [False, True])
def test_request_becomes_a_capturing_chat_request_with_tools(name: str, stream: bool) -> None:
    fmt = FORMATS[name]
    prep = _prepare(fmt, stream)
    upstream = json.loads(prep.body)
    assert upstream["return_token_ids"] is True and upstream["logprobs"] is True
    assert upstream["max_tokens"] == 64
    assert [t["function"]["name"] for t in upstream["tools"]] == ["get_weather"]
    assert bool(upstream.get("stream")) == stream
    assert fmt.upstream_path == "/v1/chat/completions"


@pytest.mark.parametrize("name", FORMAT_NAMES)
@pytest.mark.parametrize("tool", [False, True])
def test_json_answer_reaches_the_client_and_the_record(name: str, tool: bool) -> None:
    fmt = FORMATS[name]
    prep = _prepare(fmt, False)
    raw = json.dumps(_completion(tool)).encode()
    client = json.loads(fmt.client_body(raw, prep))
    text = json.dumps(client)
    assert ("get_weather" in text and "Paris" in text) if tool else "Hello there" in text
    assert "token_ids" not in text  # capture fields the client did not ask for stay out
    record = fmt.assemble(raw, False, prep)
    assert record.complete and record.prompt_token_ids == PROMPT and record.completion_token_ids == TOKENS
    assert record.completion_logprobs is not None and len(record.completion_logprobs) == len(TOKENS)
    assert record.finish_reason == ("tool_calls" if tool else "stop")


@pytest.mark.parametrize("name", FORMAT_NAMES)
@pytest.mark.parametrize("tool", [False, True])
def test_stream_reaches_the_client_and_the_record(name: str, tool: bool) -> None:
    fmt = FORMATS[name]
    prep = _prepare(fmt, True)
    raw = _stream(tool)
    client = fmt.client_stream(prep)
    out = b"".join(client.feed(raw[i:i + 9]) for i in range(0, len(raw), 9)) + client.feed(b"")
    assert client.done
    events = [sse.event_json(e)[1] for e in sse.iter_events(out)]
    text = json.dumps([e for e in events if e is not None])
    # tool-call arguments may reach the client in pieces
    pieces = ("get_weather", "city", "Par", "is") if tool else ("Hel", "lo", " the", "re")
    assert all(piece in text for piece in pieces)
    assert "token_ids" not in text
    record = fmt.assemble(raw, True, prep)
    assert record.complete and record.prompt_token_ids == PROMPT and record.completion_token_ids == TOKENS
    assert record.completion_logprobs is not None and len(record.completion_logprobs) == len(TOKENS)
    assert record.finish_reason == ("tool_calls" if tool else "stop")
    assert record.extra["usage"] == {"prompt_tokens": len(PROMPT), "completion_tokens": len(TOKENS)}


@pytest.mark.parametrize("name", FORMAT_NAMES)
def test_cut_off_stream_is_incomplete_and_ends_in_an_error_event(name: str) -> None:
    fmt = FORMATS[name]
    prep = _prepare(fmt, True)
    raw = _stream(False, done=False)
    client = fmt.client_stream(prep)
    client.feed(raw)
    client.feed(b"")
    assert not client.done
    failed = client.fail("forge proxy: upstream stream ended before its terminal event")
    assert b"upstream stream ended" in failed and failed.endswith(b"\n\n")
    record = fmt.assemble(raw, True, prep)
    assert not record.complete and record.completion_token_ids == TOKENS


@pytest.mark.parametrize("name", FORMAT_NAMES)
def test_errors_in_the_format_shape(name: str) -> None:
    fmt = FORMATS[name]
    body = json.loads(fmt.error(429, "slow down", "rate_limit"))
    assert "slow down" in json.dumps(body) and isinstance(body.get("error"), dict)
    upstream_error = b'{"error": {"message": "too long", "type": "BadRequestError", "code": 400}}'
    assert fmt.client_body(upstream_error, _prepare(fmt, False)) == upstream_error  # reshaped by the addon
    path, _ = _request(name, False)
    with pytest.raises(BadRequest):
        fmt.prepare(b"[1, 2]", Limits(), path)


@pytest.mark.parametrize("name", FORMAT_NAMES)
def test_writer_row_has_every_column_by_name(name: str) -> None:
    fmt = FORMATS[name]
    prep = _prepare(fmt, True)
    path, body = _request(name, True)
    meta = {"type": "call", "rollout_id": "r", "seq": 0, "wire_format": name, "path": path, "stream": True,
            "wants_token_ids": prep.wants_token_ids, "wants_logprobs": prep.wants_logprobs}
    row = dict(zip(store.CALL_FIELDS, writer.build_row(meta, {"request": json.dumps(body).encode(),
                                                              "response": _stream(True)}), strict=True))
    assert (row["wire_format"], row["status"], row["finish_reason"]) == (name, "ok", "tool_calls")
    assert json.loads(row["prompt_token_ids"]) == PROMPT and json.loads(row["completion_token_ids"]) == TOKENS
    assert (row["prompt_tokens"], row["completion_tokens"]) == (len(PROMPT), len(TOKENS))
    assert len(json.loads(row["completion_logprobs"])) == len(TOKENS) and row["response_bytes"] > 0
