"""The Responses API served by translation to Chat Completions: requests one way, answers (JSON and SSE) back,
checked against what Codex sends (the recorded fixture) and what the official ``openai`` SDK parses."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from forge_cli.proxy.wire import responses, route, sse
from forge_cli.proxy.wire.base import BadRequest, Limits, Prepared
from tests.proxy import fake_upstream as fake

CODEX = Path(__file__).resolve().parents[1] / "fixtures" / "harness_requests" / "codex.json"
TOOL = {"type": "function", "name": "get_weather", "description": "Weather for a city.", "strict": False,
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
PLAIN = Prepared(body=b"", changed=True)


def _chat(body: dict[str, Any], limits: Limits | None = None) -> dict[str, Any]:
    chat: dict[str, Any] = json.loads(responses.prepare(json.dumps(body).encode(), limits or Limits()).body)
    return chat


def _chunk(delta: dict[str, Any], ids: list[int], finish: str | None = None, lp: float = -0.5) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish, "token_ids": ids,
              "logprobs": {"content": [{"token": f"t{t}", "logprob": lp, "bytes": None, "top_logprobs": []}
                                       for t in ids]}}
    return sse.encode({"id": "chatcmpl-abc", "object": "chat.completion.chunk", "created": 7, "model": "policy",
                       "choices": [choice]})


def tool_stream(text: str = "Let me check.") -> list[bytes]:
    """vLLM's chunks for a turn that says something, then calls two tools (hermes parser, streamed)."""
    head = sse.encode({"id": "chatcmpl-abc", "object": "chat.completion.chunk", "created": 7, "model": "policy",
                       "prompt_token_ids": [1, 2, 3],
                       "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None,
                                    "logprobs": None}]})
    calls = [
        _chunk({"content": text}, [10, 11]),
        _chunk({"tool_calls": [{"index": 0, "id": "chatcmpl-tool-1", "type": "function",
                                "function": {"name": "get_weather", "arguments": ""}}]}, [12, 13]),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}, [14]),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}, [15, 16]),
        _chunk({"tool_calls": [{"index": 1, "id": "chatcmpl-tool-2", "type": "function",
                                "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]}, [17, 18]),
        _chunk({}, [19], finish="tool_calls"),  # the stop token: no delta, still a sampled token
    ]
    usage = sse.encode({"id": "chatcmpl-abc", "object": "chat.completion.chunk", "created": 7, "model": "policy",
                        "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 10, "total_tokens": 13}})
    return [head, *calls, usage, b"data: [DONE]\n\n"]


def _events(out: bytes) -> list[tuple[str | None, dict[str, Any]]]:
    return [sse.event_json(raw) for raw in sse.iter_events(out)]


def _translate(raw: bytes, prep: Prepared = PLAIN, step: int = 0) -> tuple[responses.ClientStream, bytes]:
    stream = responses.ClientStream(prep)
    pieces = [raw[i:i + step] for i in range(0, len(raw), step)] if step else [raw]
    out = b"".join(stream.feed(piece) for piece in pieces)
    return stream, out + stream.feed(b"")


def test_responses_routes_to_chat_completions() -> None:
    for path in ("/v1/responses", "/responses?x=1"):
        found = route(path)
        assert found is not None and (found.name, found.upstream_path) == ("responses", "/v1/chat/completions")


def test_request_items_translate_to_chat_messages() -> None:
    body = {
        "model": "policy", "instructions": "Be brief.", "stream": True, "store": False, "max_output_tokens": 100000,
        "include": ["reasoning.encrypted_content"], "reasoning": {"summary": "auto"}, "prompt_cache_key": "k",
        "temperature": 0.5, "top_p": 0.9, "parallel_tool_calls": False, "tool_choice": {"type": "function",
                                                                                        "name": "get_weather"},
        "tools": [TOOL, {"type": "web_search"}, {"type": "local_shell"}],
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Rules."}]},
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Hm."}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
            {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "get_weather",
             "arguments": '{"city": "Paris"}'},
            {"type": "function_call", "id": "fc_2", "call_id": "c2", "name": "get_weather",
             "arguments": '{"city": "Rome"}'},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "rain"}]},
            {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        ],
    }
    chat = _chat(body, Limits(max_output_tokens=8192))
    assert chat["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": [{"type": "text", "text": "Rules."}]},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "Checking.", "reasoning": "Hm.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "c2", "content": "rain"},
    ]
    assert chat["tools"] == [{"type": "function", "function": {k: TOOL[k] for k in ("name", "description",
                                                                                     "parameters", "strict")}}]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert (chat["max_tokens"], chat["temperature"], chat["top_p"], chat["parallel_tool_calls"]) == (8192, 0.5, 0.9,
                                                                                                      False)
    assert chat["stream"] is True and chat["stream_options"] == {"include_usage": True}
    assert chat["return_token_ids"] is True and chat["logprobs"] is True
    for dropped in ("input", "include", "store", "reasoning", "prompt_cache_key", "instructions", "max_output_tokens"):
        assert dropped not in chat


def test_request_defaults_and_refusals() -> None:
    chat = _chat({"model": "m", "input": "hi", "tools": [{"type": "web_search"}], "tool_choice": "required"},
                 Limits(max_output_tokens=512))
    assert chat["messages"] == [{"role": "user", "content": "hi"}] and chat["max_tokens"] == 512
    assert "tools" not in chat and "tool_choice" not in chat and "stream" not in chat
    prep = responses.prepare(json.dumps({"model": "m", "input": "hi", "include": [responses.LOGPROBS_INCLUDE],
                                         "top_logprobs": 2, "enable_response_messages": True}).encode(), Limits())
    assert prep.wants_logprobs and prep.wants_token_ids and json.loads(prep.body)["top_logprobs"] == 2
    assert not responses.prepare(b'{"model": "m", "input": "hi"}', Limits()).wants_logprobs
    for bad in ({"model": "m", "input": "hi", "previous_response_id": "resp_1"}, {"model": "m"},
                {"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}]},
                {"model": "m", "input": [{"role": "robot", "content": "x"}]}):
        with pytest.raises(BadRequest) as err:
            responses.prepare(json.dumps(bad).encode(), Limits())
        assert err.value.status == 400
    with pytest.raises(BadRequest, match="previous_response_id"):
        responses.prepare(b'{"input": "x", "previous_response_id": "r"}', Limits())


def test_codex_fixture_is_normalised() -> None:
    """Codex's real first request: every item and function tool kept, the fields Chat has no use for dropped."""
    body = json.loads(CODEX.read_text())["body"]
    chat = _chat(body, Limits(max_output_tokens=4096))
    assert [m["role"] for m in chat["messages"]] == [i["role"] for i in body["input"]]
    assert chat["messages"][0]["content"][0]["text"] == body["input"][0]["content"][0]["text"]
    assert [t["function"]["name"] for t in chat["tools"]] == [t["name"] for t in body["tools"]
                                                              if t["type"] == "function"]
    assert chat["tool_choice"] == "auto" and chat["parallel_tool_calls"] is True
    assert chat["max_tokens"] == 4096 and chat["stream"] is True and chat["model"] == "policy"
    assert not {"include", "store", "reasoning", "prompt_cache_key", "client_metadata", "input"} & set(chat)


def test_function_call_round_trip_rebuilds_the_generated_turn() -> None:
    """The output items of one answer, sent back as input (as Codex does), become the chat message the model
    generated: the next prompt renders the same turn, so consecutive calls merge into one training sequence."""
    completion = fake.chat_json({"model": "m", "tools": [{"type": "function", "function": {"name": "get_weather"}}],
                                 "return_token_ids": True, "logprobs": True})
    completion["choices"][0]["message"]["content"] = "Let me check."
    response = responses.to_response(completion, PLAIN)
    assert [i["type"] for i in response["output"]] == ["message", "function_call"]
    call = response["output"][1]
    assert (call["call_id"], call["name"], call["arguments"]) == ("call_1", "get_weather", '{"city": "Paris"}')
    chat = _chat({"model": "m", "input": [{"role": "user", "content": "weather?"}, *response["output"],
                                          {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}]})
    generated = {k: v for k, v in completion["choices"][0]["message"].items() if v is not None}  # vLLM's nulls out
    assert chat["messages"][1] == generated
    assert chat["messages"][2] == {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}


def test_non_streamed_answer() -> None:
    completion = fake.chat_json({"model": "m", "return_token_ids": True, "logprobs": True})
    body = json.loads(responses.client_body(json.dumps(completion).encode(), PLAIN))
    assert body["id"] == "resp_fake" and body["object"] == "response" and body["status"] == "completed"
    assert body["output"][0]["content"][0] == {"type": "output_text", "text": "Hello, world!", "annotations": [],
                                               "logprobs": []}
    assert body["usage"] == {"input_tokens": 32, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 4,
                             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 36}
    assert "prompt_token_ids" not in json.dumps(body) and "token_ids" not in json.dumps(body)
    wants = Prepared(body=b"", changed=True, wants_logprobs=True, wants_token_ids=True)
    full = json.loads(responses.client_body(json.dumps(completion).encode(), wants))
    assert len(full["output"][0]["content"][0]["logprobs"]) == 4
    assert full["output_messages"][0]["tokens"] == fake.TOKENS
    assert full["input_messages"][0]["tokens"] == fake.PROMPT_IDS
    error = b'{"error": {"message": "too long", "type": "BadRequestError", "code": 400}}'
    assert responses.client_body(error, PLAIN) == error
    record = responses.assemble(json.dumps(completion).encode(), False, PLAIN)
    assert record.response == body and record.completion_token_ids == fake.TOKENS
    assert len(record.completion_logprobs or []) == len(fake.TOKENS) and record.prompt_token_ids == fake.PROMPT_IDS


def test_text_stream_event_order() -> None:
    raw = b"".join(fake.chat_events({"model": "m", "stream": True, "return_token_ids": True, "logprobs": True,
                                     "stream_options": {"include_usage": True}}))
    stream, out = _translate(raw)
    events = _events(out)
    assert [name for name, _ in events] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        *["response.output_text.delta"] * 4, "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.completed"]
    assert all(name == data["type"] for name, data in events)
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    assert stream.done and events[-1][1]["response"]["usage"]["output_tokens"] == 4
    assert b"token_ids" not in out and b'"logprob"' not in out
    assert _translate(raw, step=7)[1] == out  # split anywhere, same events


def test_tool_call_stream() -> None:
    raw = b"".join(tool_stream())
    _, out = _translate(raw)
    names = [name for name, _ in _events(out)]
    assert names == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done",
        "response.completed"]
    final = _events(out)[-1][1]["response"]
    assert [(i["type"], i.get("call_id"), i.get("arguments")) for i in final["output"]] == [
        ("message", None, None), ("function_call", "chatcmpl-tool-1", '{"city": "Paris"}'),
        ("function_call", "chatcmpl-tool-2", '{"city": "Rome"}')]
    assert final["output"][0]["content"][0]["text"] == "Let me check." and final["status"] == "completed"
    assert len({i["id"] for i in final["output"]}) == 3
    record = responses.assemble(raw, True, PLAIN)
    assert record.complete and record.response == final and record.finish_reason == "tool_calls"
    assert record.prompt_token_ids == [1, 2, 3] and record.completion_token_ids == list(range(10, 20))
    assert len(record.completion_logprobs or []) == len(record.completion_token_ids or [])  # tool tokens too


def test_stream_logprobs_when_asked_and_limits_and_failures() -> None:
    wants = Prepared(body=b"", changed=True, wants_logprobs=True)
    _, out = _translate(b"".join(tool_stream()), wants)
    deltas = [d for n, d in _events(out) if n == "response.output_text.delta"]
    assert [lp["token"] for lp in deltas[0]["logprobs"]] == ["t10", "t11"]
    length = [*tool_stream()[:2], _chunk({"content": " more"}, [12], finish="length"), b"data: [DONE]\n\n"]
    final = _events(_translate(b"".join(length))[1])[-1]
    assert final[0] == "response.completed" and final[1]["response"]["status"] == "incomplete"
    assert final[1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    failed = [tool_stream()[0], sse.encode({"error": {"message": "engine died", "code": 500}}), b"data: [DONE]\n\n"]
    stream, out = _translate(b"".join(failed))
    assert stream.done and _events(out)[-1][0] == "response.failed"
    cut = b"".join(tool_stream()[:4])  # no [DONE]: no terminal event, the record is incomplete
    stream, out = _translate(cut)
    assert not stream.done and b"response.completed" not in out
    record = responses.assemble(cut, True, PLAIN)
    assert not record.complete and record.response["status"] == "in_progress"
    assert record.completion_token_ids == [10, 11, 12, 13, 14]
    empty = [tool_stream()[0], _chunk({}, [2], finish="stop"), b"data: [DONE]\n\n"]
    final = _events(_translate(b"".join(empty))[1])[-1][1]["response"]
    assert final["output"][0]["content"][0]["text"] == ""  # always a message item, as non-streamed


def _sdk(answer: Callable[[dict[str, Any]], httpx2.Response]) -> openai.OpenAI:
    """The official client, its HTTP answered by the proxy's translation of a fake chat upstream's answer."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        return answer(json.loads(request.content))

    return openai.OpenAI(base_url="http://proxy/v1", api_key="k", max_retries=0,
                         http_client=httpx2.Client(transport=httpx2.MockTransport(handler)))


def _served(upstream: Callable[[dict[str, Any]], bytes]) -> Callable[[dict[str, Any]], httpx2.Response]:
    def answer(body: dict[str, Any]) -> httpx2.Response:
        prep = responses.prepare(json.dumps(body).encode(), Limits(max_output_tokens=64))
        raw = upstream(json.loads(prep.body))
        if prep.stream:
            stream = responses.ClientStream(prep)
            return httpx2.Response(200, content=stream.feed(raw) + stream.feed(b""),
                                  headers={"content-type": "text/event-stream"})
        return httpx2.Response(200, content=responses.client_body(raw, prep),
                              headers={"content-type": "application/json"})

    return answer


def test_official_sdk_reads_the_translation() -> None:
    plain = _sdk(_served(lambda chat: b"".join(fake.chat_events(chat)) if chat.get("stream")
                         else json.dumps(fake.chat_json(chat)).encode()))
    assert plain.responses.create(model="m", input="hi").output_text == "Hello, world!"
    events = list(plain.responses.create(model="m", input="hi", stream=True))
    assert events[-1].type == "response.completed" and events[-1].response.output_text == "Hello, world!"
    with plain.responses.stream(model="m", input="hi") as stream:
        assert "".join(e.delta for e in stream if e.type == "response.output_text.delta") == "Hello, world!"
        assert stream.get_final_response().output_text == "Hello, world!"
    tools = _sdk(_served(lambda chat: b"".join(tool_stream()) if chat.get("stream")
                         else json.dumps(fake.chat_json(chat)).encode()))
    resp = tools.responses.create(model="m", input="weather?", tools=[TOOL])  # type: ignore[list-item]
    assert [(i.type, getattr(i, "arguments", None)) for i in resp.output] == [("function_call", '{"city": "Paris"}')]
    with tools.responses.stream(model="m", input="weather?", tools=[TOOL]) as stream:  # type: ignore[list-item]
        deltas = [e.snapshot for e in stream if e.type == "response.function_call_arguments.delta"]
        final = stream.get_final_response()
    assert deltas == ['{"city": ', '{"city": "Paris"}', '{"city": "Rome"}']
    assert final.output_text == "Let me check."
    assert [(i.type, getattr(i, "call_id", None)) for i in final.output] == [
        ("message", None), ("function_call", "chatcmpl-tool-1"), ("function_call", "chatcmpl-tool-2")]


def test_namespaced_tools_are_flattened_and_named_back() -> None:
    """Codex sends MCP tools as one ``namespace`` tool (``mcp__forge``): the model sees ``mcp__forge__<name>``
    function tools; its calls come back as function_call items with ``namespace`` and the tool's own name."""
    inner = {**TOOL, "name": "list_inbox"}
    body = {"model": "m", "input": [
        {"type": "message", "role": "user", "content": "check mail"},
        {"type": "function_call", "namespace": "mcp__forge", "name": "list_inbox", "call_id": "c1", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "[]"}],
        "tools": [TOOL, {"type": "namespace", "name": "mcp__forge", "description": "task tools", "tools": [inner]}]}
    prep = responses.prepare(json.dumps(body).encode(), Limits())
    sent = json.loads(prep.body)
    assert [t["function"]["name"] for t in sent["tools"]] == ["get_weather", "mcp__forge__list_inbox"]
    assert sent["messages"][1]["tool_calls"][0]["function"]["name"] == "mcp__forge__list_inbox"
    assert prep.namespaced == {"mcp__forge__list_inbox": ("mcp__forge", "list_inbox")}
    completion = {"id": "chatcmpl-x", "object": "chat.completion", "created": 1, "model": "m",
                  "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                      "role": "assistant", "content": None, "tool_calls": [
                          {"id": "c2", "type": "function",
                           "function": {"name": "mcp__forge__list_inbox", "arguments": "{}"}},
                          {"id": "c3", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}}]}
    calls = json.loads(responses.client_body(json.dumps(completion).encode(), prep))["output"]
    assert [(c["name"], c.get("namespace")) for c in calls] == [("list_inbox", "mcp__forge"), ("get_weather", None)]
    stream = [b.replace(b"get_weather", b"mcp__forge__list_inbox") for b in tool_stream()]
    final = _events(_translate(b"".join(stream), prep=prep)[1])[-1][1]["response"]
    assert [(i.get("name"), i.get("namespace")) for i in final["output"][1:]] == [("list_inbox", "mcp__forge")] * 2
