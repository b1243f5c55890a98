"""``WireFormat.upstream_answer``: a recorded client answer back to the Chat Completions answer it was translated from
(prefix replay answers recorded calls from upstream, in Chat Completions). With the recording's capture fields and
usage put back, ``client_body`` gives the recorded answer again, exactly, for every format: text, two tool calls
with unicode arguments, reasoning, a length finish, Responses namespaced tools, arguments that are no JSON object;
JSON answers and streamed ones as the record assembles them. Anything else is a ValueError."""

from __future__ import annotations

import json
from typing import Any

import pytest

from forge_cli.proxy.wire import FORMATS, chat, gemini, sse
from forge_cli.proxy.wire.base import Limits, Prepared

TOOL = {"name": "get_weather", "description": "weather", "parameters": {"type": "object", "properties": {}}}
NAMESPACE = {"type": "namespace", "name": "mcp__fs", "description": "files",
             "tools": [{"type": "function", "name": "read", "parameters": {"type": "object", "properties": {}}}]}
NAMES = sorted(FORMATS)


def _request(name: str, stream: bool, logprobs: bool = False, namespaced: bool = False) -> tuple[str, dict[str, Any]]:
    """(client path, body) of a call in the format's own terms; ``logprobs``: the client asks for them (and for
    token ids where its format has a way to)."""
    if name == "chat":
        body: dict[str, Any] = {"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}],
                                "tools": [{"type": "function", "function": TOOL}]}
        return "/v1/chat/completions", {**body, "logprobs": True, "return_token_ids": True} if logprobs else body
    if name == "responses":
        body = {"model": "m", "stream": stream, "input": "hi",
                "tools": [{"type": "function", **TOOL}, *([NAMESPACE] if namespaced else [])]}
        capture = {"include": ["message.output_text.logprobs"], "enable_response_messages": True}
        return "/v1/responses", {**body, **capture} if logprobs else body
    if name == "anthropic":
        return "/v1/messages", {"model": "m", "stream": stream, "max_tokens": 64,
                                "messages": [{"role": "user", "content": "hi"}],
                                "tools": [{"name": TOOL["name"], "input_schema": TOOL["parameters"]}]}
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    return f"/v1beta/models/m:{method}", {"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
                                          "generationConfig": {"responseLogprobs": logprobs},
                                          "tools": [{"functionDeclarations": [TOOL]}]}


def _prep(name: str, stream: bool, **options: bool) -> Prepared:
    path, body = _request(name, stream, **options)
    return FORMATS[name].prepare(json.dumps(body).encode(), Limits(), path)


def _completion(content: str | None = "Hello there", calls: list[tuple[str, str, str]] | None = None,
                reasoning: str | None = None, finish: str = "stop") -> dict[str, Any]:
    """vLLM's answer with capture fields and usage; ``calls``: (id, name, arguments) each."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [{"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                                 for i, n, a in calls]
    tokens = [10, 11, 12, 13]
    return {"id": "chatcmpl-abc", "object": "chat.completion", "created": 1700000000, "model": "m",
            "prompt_token_ids": [1, 2, 3],
            "choices": [{"index": 0, "message": message, "token_ids": tokens, "finish_reason": finish,
                         "logprobs": {"content": [{"token": f"t{t}", "logprob": -0.25, "bytes": [], "top_logprobs": []}
                                                  for t in tokens]}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}}


def _stream(completion: dict[str, Any]) -> bytes:
    """``completion`` as vLLM streams it: reasoning, text and each call's arguments in two pieces, a token a chunk."""
    head = {"id": completion["id"], "object": "chat.completion.chunk", "created": completion["created"],
            "model": completion["model"]}
    choice = completion["choices"][0]
    message = choice["message"]
    deltas: list[dict[str, Any]] = []
    for key in ("reasoning_content", "content"):
        text = message.get(key) or ""
        deltas += [{key: text[:3]}, {key: text[3:]}] if text else []
    for i, call in enumerate(message.get("tool_calls") or ()):
        args = call["function"]["arguments"]
        deltas += [{"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                    "function": {"name": call["function"]["name"], "arguments": args[:4]}}]},
                   {"tool_calls": [{"index": i, "function": {"arguments": args[4:]}}]}]
    chunks: list[dict[str, Any]] = [{**head, "prompt_token_ids": completion["prompt_token_ids"],
                                     "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
    for n, delta in enumerate(deltas):
        chunks.append({**head, "choices": [{
            "index": 0, "delta": delta, "token_ids": [100 + n],
            "logprobs": {"content": [{"token": f"t{n}", "logprob": -0.5, "bytes": [], "top_logprobs": []}]},
            "finish_reason": choice["finish_reason"] if n == len(deltas) - 1 else None}]})
    chunks.append({**head, "choices": [], "usage": completion["usage"]})
    return b"".join(sse.encode(c) for c in chunks) + b"data: [DONE]\n\n"


def _replayed(name: str, answer: Any, original: dict[str, Any], prep: Prepared) -> dict[str, Any]:
    """``answer`` through upstream_answer (checked free of capture fields), the original's put back, and back
    through ``client_body``: what a replayed call's client gets."""
    invert = FORMATS[name].upstream_answer
    assert invert is not None
    upstream = invert(json.loads(json.dumps(answer)))
    assert upstream["object"] == "chat.completion" and len(upstream["choices"]) == 1
    assert not {"prompt_token_ids", "prompt_text", "usage"} & set(upstream)
    assert not {"token_ids", "logprobs"} & set(upstream["choices"][0])
    choice = original["choices"][0]
    upstream["choices"][0].update(token_ids=choice["token_ids"], logprobs=choice["logprobs"])
    upstream.update(prompt_token_ids=original["prompt_token_ids"], usage=original["usage"])
    return dict(json.loads(FORMATS[name].client_body(json.dumps(upstream).encode(), prep)))


def _roundtrip(name: str, original: dict[str, Any], **options: bool) -> dict[str, Any]:
    """The JSON and the streamed answer to ``original`` replay exactly; the Chat answer of the JSON one."""
    prep = _prep(name, False, **options)
    answer = json.loads(FORMATS[name].client_body(json.dumps(original).encode(), prep))
    assert _replayed(name, answer, original, prep) == answer
    prep = _prep(name, True, **options)
    raw = _stream(original)
    streamed = FORMATS[name].assemble(raw, True, prep).response
    upstream = chat.assemble(raw, True, Prepared(b"", True, wants_token_ids=True, wants_logprobs=True)).response
    assert _replayed(name, streamed, upstream, prep) == streamed
    invert = FORMATS[name].upstream_answer
    assert invert is not None
    return invert(answer)


CALLS = [("call_a", "get_weather", '{"city": "Zürich", "note": "東京 ✓ \\"quoted\\""}'),
         ("call_b", "get_weather", '{"city": "São Paulo", "days": [1, 2.5, null]}')]


@pytest.mark.parametrize("name", NAMES)
def test_text_roundtrips(name: str) -> None:
    upstream = _roundtrip(name, _completion())
    assert upstream["choices"][0]["message"]["content"] == "Hello there"
    assert upstream["choices"][0]["finish_reason"] == "stop"
    assert upstream["id"] == "chatcmpl-abc" and upstream["model"] == "m"


@pytest.mark.parametrize("name", NAMES)
def test_two_tool_calls_with_unicode_arguments_roundtrip(name: str) -> None:
    for content in (None, "Let me look."):
        upstream = _roundtrip(name, _completion(content, CALLS, finish="tool_calls"))
        message = upstream["choices"][0]["message"]
        assert [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
                for c in message["tool_calls"]] == [(i, n, json.loads(a)) for i, n, a in CALLS]
        assert message["content"] == content and upstream["choices"][0]["finish_reason"] == "tool_calls"


@pytest.mark.parametrize("name", NAMES)
def test_reasoning_roundtrips(name: str) -> None:
    upstream = _roundtrip(name, _completion(reasoning="The user greets me; I greet back."))
    if name == "anthropic":  # the Messages translation drops reasoning: nothing to give back
        assert "reasoning_content" not in upstream["choices"][0]["message"]
    else:
        assert upstream["choices"][0]["message"]["reasoning_content"] == "The user greets me; I greet back."
    _roundtrip(name, _completion(None, CALLS[:1], reasoning="Weather, then.", finish="tool_calls"))


@pytest.mark.parametrize("name", NAMES)
def test_a_length_finish_roundtrips(name: str) -> None:
    upstream = _roundtrip(name, _completion("Hello th", finish="length"))
    assert upstream["choices"][0]["finish_reason"] == "length"
    _roundtrip(name, _completion(None, [("call_a", "get_weather", '{"city": "Par')], finish="length"))


@pytest.mark.parametrize("name", NAMES)
def test_every_finish_reason_roundtrips(name: str) -> None:
    for finish in ("stop", "length", "content_filter", "abort"):
        _roundtrip(name, _completion(finish=finish))
    for finish in ("tool_calls", "stop"):  # vLLM ends a tool call with tool_calls, a chat template may with stop
        _roundtrip(name, _completion(None, CALLS, finish=finish))
    if name == "gemini":
        answer = json.loads(FORMATS[name].client_body(json.dumps(_completion(finish="content_filter")).encode(),
                                                      _prep(name, False)))
        assert answer["candidates"][0]["finishReason"] == "SAFETY"
        assert gemini.upstream_answer(answer)["choices"][0]["finish_reason"] == "content_filter"


@pytest.mark.parametrize("name", ["chat", "gemini", "responses"])  # Anthropic's answers carry no logprobs
def test_answers_with_capture_fields_the_client_asked_for_roundtrip(name: str) -> None:
    prep = _prep(name, False, logprobs=True)
    for original in (_completion(), _completion("Sure.", CALLS, finish="tool_calls")):
        answer = json.loads(FORMATS[name].client_body(json.dumps(original).encode(), prep))
        assert "-0.25" in json.dumps(answer)  # the client's answer holds logprobs, restored from the recording
        assert _replayed(name, answer, original, prep) == answer


def test_the_formats_own_ids_and_created_are_inverted() -> None:
    original = _completion(None, CALLS, finish="tool_calls")
    answers = {name: json.loads(FORMATS[name].client_body(json.dumps(original).encode(), _prep(name, False)))
               for name in NAMES}
    assert answers["anthropic"]["id"] == "msg_abc" and answers["responses"]["id"] == "resp_abc"
    assert answers["gemini"]["responseId"] == "abc"
    for name, answer in answers.items():
        invert = FORMATS[name].upstream_answer
        assert invert is not None
        upstream = invert(answer)
        assert upstream["id"] == "chatcmpl-abc"
        assert upstream["created"] == (0 if name in ("anthropic", "gemini") else 1700000000)  # none to give back
        assert [c["id"] for c in upstream["choices"][0]["message"]["tool_calls"]] == ["call_a", "call_b"]


def test_responses_namespaced_tools_get_their_flat_chat_name_back() -> None:
    original = _completion(None, [("call_n", "mcp__fs__read", '{"path": "/tmp/ä"}'), CALLS[0]], finish="tool_calls")
    prep = _prep("responses", False, namespaced=True)
    answer = json.loads(FORMATS["responses"].client_body(json.dumps(original).encode(), prep))
    calls = [item for item in answer["output"] if item["type"] == "function_call"]
    assert [(c.get("namespace"), c["name"]) for c in calls] == [("mcp__fs", "read"), (None, "get_weather")]
    upstream = _roundtrip("responses", original, namespaced=True)
    assert [c["function"]["name"] for c in upstream["choices"][0]["message"]["tool_calls"]] == [
        "mcp__fs__read", "get_weather"]


@pytest.mark.parametrize("name", ["anthropic", "gemini"])
def test_arguments_that_are_no_json_object_get_their_text_back(name: str) -> None:
    """The forward translations parse arguments: unparsable ones are kept as ``{"_raw": text}`` (and Gemini wraps
    JSON that is no object as ``{"value": ...}``); the wrapper is undone only where the forward path added it."""
    # a real {"_raw": text} object whose text does not parse reads as the wrapper: a different Chat answer that
    # translates to the same client answer
    cases = {"not json {": "not json {", '{"_raw": "1"}': '{"_raw": "1"}', '{"_raw": "x y"}': "x y"}
    if name == "gemini":
        cases.update({"[1, 2]": "[1, 2]", '{"value": {"a": 1}}': '{"value": {"a": 1}}', '"text"': '"text"'})
    for arguments, expected in cases.items():
        upstream = _roundtrip(name, _completion(None, [("call_r", "get_weather", arguments)], finish="tool_calls"))
        assert upstream["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == expected


@pytest.mark.parametrize("name", NAMES)
def test_what_is_no_answer_is_a_value_error(name: str) -> None:
    invert = FORMATS[name].upstream_answer
    assert invert is not None
    error = json.loads(FORMATS[name].error(400, "bad request", "invalid_request_error"))
    for garbage in ([1, 2], error, {"error": {"message": "too long", "code": 400}}, "text", None, {}):
        with pytest.raises(ValueError):
            invert(garbage)


def test_a_failed_or_unfinished_responses_response_is_a_value_error() -> None:
    answer = json.loads(FORMATS["responses"].client_body(json.dumps(_completion()).encode(),
                                                         _prep("responses", False)))
    invert = FORMATS["responses"].upstream_answer
    assert invert is not None
    for status in ("failed", "in_progress"):
        with pytest.raises(ValueError):
            invert({**answer, "status": status})


def test_chat_keeps_the_answer_as_it_was_without_capture_fields_or_usage() -> None:
    original = _completion(reasoning="hm")
    original["system_fingerprint"] = "fp"
    upstream = chat.upstream_answer(original)
    assert upstream == {"id": "chatcmpl-abc", "object": "chat.completion", "created": 1700000000, "model": "m",
                        "system_fingerprint": "fp",
                        "choices": [{"index": 0, "message": original["choices"][0]["message"],
                                     "finish_reason": "stop"}]}
    assert "token_ids" in original["choices"][0] and "usage" in original  # the record is not changed


@pytest.mark.parametrize("name", ["anthropic", "gemini"])
def test_unparsable_arguments_sent_back_reach_the_upstream_as_written(name: str) -> None:
    """An answer whose arguments do not parse reaches the harness as ``{"_raw": text}``; when the harness sends it
    back in the history, the upstream gets the policy's own text again (so the next prompt extends the previous
    call's ids: Gemini CLI's merges broke on this), and parsed arguments stay JSON."""
    from forge_cli.proxy.wire.base import Limits

    for arguments, expected in {"not json {": "not json {", '{"a": 1}': '{"a": 1}'}.items():
        original = _completion(None, [("call_r", "get_weather", arguments)], finish="tool_calls")
        answer = json.loads(FORMATS[name].client_body(json.dumps(original).encode(), _prep(name, False)))
        if name == "anthropic":
            path, body = "/v1/messages", {"model": "m", "max_tokens": 8, "messages": [
                {"role": "user", "content": "hi"}, {"role": "assistant", "content": answer["content"]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_r", "content": "ok"}]}]}
        else:
            path, body = "/v1beta/models/m:generateContent", {"contents": [
                {"role": "user", "parts": [{"text": "hi"}]}, answer["candidates"][0]["content"],
                {"role": "user", "parts": [{"functionResponse": {"id": "call_r", "name": "get_weather",
                                                                 "response": {"output": "ok"}}}]}]}
        chat = json.loads(FORMATS[name].prepare(json.dumps(body).encode(), Limits(), path).body)
        sent = next(m for m in chat["messages"] if m.get("tool_calls"))
        assert sent["tool_calls"][0]["function"]["arguments"] == expected
