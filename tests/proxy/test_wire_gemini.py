"""The Gemini API served by translation to Chat Completions: requests one way, answers (JSON and SSE) back,
checked against what Gemini CLI sends (the recorded fixture, and the function-call turn it sends back) and what
the official ``google-genai`` SDK parses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from google.genai import types

from forge_cli.proxy import auth
from forge_cli.proxy.wire import format_for_path, gemini, route, sse
from forge_cli.proxy.wire.base import BadRequest, Limits, Prepared
from tests.proxy import fake_upstream as fake
from tests.proxy.test_wire_responses import tool_stream

GEMINI_CLI = Path(__file__).resolve().parents[1] / "fixtures" / "harness_requests" / "gemini-cli.json"
STREAM = "/v1beta/models/policy:streamGenerateContent?alt=sse"
PLAIN = Prepared(body=b"", changed=True)
WEATHER = {"name": "get_weather", "description": "Weather for a city.",
           "parameters": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}, "required": ["city"]}}


def _chat(body: dict[str, Any], path: str = STREAM, limits: Limits | None = None) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(gemini.prepare(json.dumps(body).encode(), limits or Limits(), path).body)
    return out


def _translate(raw: bytes, prep: Prepared = PLAIN, step: int = 0) -> tuple[gemini.ClientStream, bytes]:
    stream = gemini.ClientStream(prep)
    pieces = [raw[i:i + step] for i in range(0, len(raw), step)] if step else [raw]
    out = b"".join(stream.feed(piece) for piece in pieces)
    return stream, out + stream.feed(b"")


def _chunks(out: bytes) -> list[dict[str, Any]]:
    """Every SSE event is a bare ``data:`` line holding one GenerateContentResponse (what alt=sse sends)."""
    events = sse.iter_events(out)
    assert all(e.startswith(b"data: {") and b"\nevent:" not in e for e in events)
    return [json.loads(sse.parse_event(e)[1]) for e in events]


def test_routes_and_error_shape_guess() -> None:
    for path in (STREAM, "/v1beta/models/policy:generateContent", "/v1/models/gemini-2.5-pro:generateContent"):
        found = route(path)
        assert found is not None and (found.name, found.upstream_path) == ("gemini", "/v1/chat/completions")
    for path in ("/v1beta/models/policy:countTokens", "/v1beta/models", "/v1beta/models/policy:embedContent"):
        assert route(path) is None and format_for_path(path) == "gemini"
    assert format_for_path("/v1/chat/completions") == "chat" and format_for_path("/v1/messages") == "anthropic"
    assert gemini.target(STREAM) == ("policy", True)
    assert gemini.target("/v1beta/models/models%2Fx:generateContent?key=k") == ("models/x", False)
    with pytest.raises(BadRequest, match="alt=sse"):
        gemini.target("/v1beta/models/policy:streamGenerateContent")


def test_key_in_query_is_taken_out_of_the_path() -> None:
    assert auth.pop_query_key("/v1beta/models/m:streamGenerateContent?alt=sse&key=se%2Fcret") == (
        "/v1beta/models/m:streamGenerateContent?alt=sse", "se/cret")
    assert auth.pop_query_key("/v1beta/models/m:generateContent?key=abc") == ("/v1beta/models/m:generateContent",
                                                                             "abc")
    assert auth.pop_query_key("/v1/chat/completions?monkey=1") == ("/v1/chat/completions?monkey=1", None)
    assert auth.pop_query_key("/v1/chat/completions") == ("/v1/chat/completions", None)


def test_gemini_cli_fixture_is_normalised() -> None:
    """Gemini CLI's real first request: system instruction, both user parts, every function declaration kept;
    thinkingConfig dropped, no output limit in the request so the proxy's applies, the model from the path."""
    fixture = json.loads(GEMINI_CLI.read_text())
    body = fixture["body"]
    path = fixture["path"].split("/r/rec0001", 1)[1]
    prep = gemini.prepare(json.dumps(body).encode(), Limits(max_output_tokens=4096), path)
    chat = json.loads(prep.body)
    assert (prep.stream, prep.model, prep.wants_token_ids, prep.wants_logprobs) == (True, "policy", False, False)
    assert chat["model"] == "policy" and chat["stream"] is True and chat["stream_options"] == {"include_usage": True}
    assert chat["return_token_ids"] is True and chat["logprobs"] is True and chat["max_tokens"] == 4096
    system, user = chat["messages"]
    assert system == {"role": "system", "content": body["systemInstruction"]["parts"][0]["text"]}
    texts = [p["text"] for p in body["contents"][0]["parts"]]
    assert user == {"role": "user", "content": "\n\n".join(texts)} and user["content"].endswith(fixture["instruction"])
    declarations = body["tools"][0]["functionDeclarations"]
    assert [t["function"]["name"] for t in chat["tools"]] == [d["name"] for d in declarations]
    assert [t["function"]["parameters"] for t in chat["tools"]] == [d["parametersJsonSchema"] for d in declarations]
    assert chat["tool_choice"] == "auto"
    gen = body["generationConfig"]
    assert (chat["temperature"], chat["top_p"], chat["top_k"]) == (gen["temperature"], gen["topP"], gen["topK"])
    for dropped in ("contents", "systemInstruction", "generationConfig", "thinkingConfig", "toolConfig"):
        assert dropped not in chat


def test_function_call_turn_as_gemini_cli_sends_it() -> None:
    """The history Gemini CLI 0.61 sends after running a tool (captured from the real binary): the model turn's
    functionCall (with a thoughtSignature beside it) and the user turn's functionResponse share an id."""
    body = {"contents": [
        {"role": "user", "parts": [{"text": "Create hello.txt"}]},
        {"role": "model", "parts": [
            {"text": "I'll create it."},
            {"functionCall": {"id": "call_abc", "args": {"command": "echo hello > hello.txt", "description": "write"},
                              "name": "run_shell_command"}, "thoughtSignature": "skip_thought_signature_validator"}]},
        {"role": "user", "parts": [{"functionResponse": {
            "name": "run_shell_command", "id": "call_abc",
            "response": {"output": "<untrusted_context>\nOutput: (empty)\n</untrusted_context>"}}}]},
    ]}
    assert _chat(body)["messages"] == [
        {"role": "user", "content": "Create hello.txt"},
        {"role": "assistant", "content": "I'll create it.", "tool_calls": [{
            "id": "call_abc", "type": "function", "function": {
                "name": "run_shell_command",
                "arguments": '{"command": "echo hello > hello.txt", "description": "write"}'}}]},
        {"role": "tool", "tool_call_id": "call_abc",
         "content": "<untrusted_context>\nOutput: (empty)\n</untrusted_context>"},
    ]


def test_calls_without_ids_pair_by_name_and_order() -> None:
    body = {"contents": [
        {"role": "user", "parts": [{"text": "Weather in Paris and Rome?"}]},
        {"role": "model", "parts": [{"thought": True, "text": "Two calls."},
                                    {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}},
                                    {"functionCall": {"name": "get_time", "args": {}}},
                                    {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}}]},
        {"role": "user", "parts": [
            {"functionResponse": {"name": "get_time", "response": {"output": "noon"}}},
            {"functionResponse": {"name": "get_weather", "response": {"output": "sunny"}}},
            {"functionResponse": {"name": "get_weather", "response": {"error": "no data"}}},
            {"text": "Summarise."}]},
    ]}
    messages = _chat(body)["messages"]
    assert messages[1]["content"] is None  # the thought part is not trained on
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["call_0_0", "call_0_1", "call_0_2"]
    assert messages[2:] == [{"role": "tool", "tool_call_id": "call_0_1", "content": "noon"},
                            {"role": "tool", "tool_call_id": "call_0_0", "content": "sunny"},
                            {"role": "tool", "tool_call_id": "call_0_2", "content": "[error] no data"},
                            {"role": "user", "content": "Summarise."}]


def test_schema_dialect_tool_config_and_generation_config() -> None:
    nested = {"type": "OBJECT", "nullable": True, "propertyOrdering": ["type", "tags"], "properties": {
        "type": {"type": "STRING", "enum": ["a", "b"]},  # a property named "type" stays a property
        "tags": {"type": "ARRAY", "items": {"type": "STRING"}, "minItems": 1},
        "either": {"anyOf": [{"type": "INTEGER"}, {"type": "NUMBER", "format": "float"}]}}}
    body = {"contents": [{"parts": [{"text": "hi"}]}],
            "tools": [{"functionDeclarations": [WEATHER, {"name": "nested", "parameters": nested},
                                                {"name": "bare"}]}, {"googleSearch": {}}],
            "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}},
            "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
            "generationConfig": {"maxOutputTokens": 100000, "stopSequences": ["END"], "seed": 7, "candidateCount": 1,
                                 "responseMimeType": "application/json",
                                 "responseSchema": {"type": "OBJECT", "properties": {"x": {"type": "BOOLEAN"}}},
                                 "responseLogprobs": True, "logprobs": 2, "thinkingConfig": {"thinkingBudget": 0}}}
    prep = gemini.prepare(json.dumps(body).encode(), Limits(max_output_tokens=512),
                          "/v1beta/models/policy:generateContent")
    chat = json.loads(prep.body)
    assert prep.stream is False and prep.wants_logprobs and "stream" not in chat
    params = [t["function"]["parameters"] for t in chat["tools"]]
    assert params[0] == {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    assert params[1] == {"type": ["object", "null"], "properties": {
        "type": {"type": "string", "enum": ["a", "b"]},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "either": {"anyOf": [{"type": "integer"}, {"type": "number", "format": "float"}]}}}
    assert params[2] == {"type": "object", "properties": {}}
    assert chat["messages"] == [{"role": "user", "content": "hi"}]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert (chat["max_tokens"], chat["stop"], chat["seed"], chat["top_logprobs"]) == (512, ["END"], 7, 2)
    assert chat["response_format"] == {"type": "json_schema", "json_schema": {"name": "response", "schema": {
        "type": "object", "properties": {"x": {"type": "boolean"}}}}}
    for mode, choice in (("NONE", "none"), ("AUTO", "auto"), ("ANY", "required"), ("VALIDATED", "auto")):
        body["toolConfig"] = {"functionCallingConfig": {"mode": mode}}
        assert _chat(body)["tool_choice"] == choice


def test_refusals() -> None:
    for bad, status in (({"contents": [{"parts": [{"text": "x"}]}], "generationConfig": {"candidateCount": 2}}, 400),
                        ({"contents": [], "cachedContent": "cachedContents/1"}, 400), ({}, 400),
                        ({"contents": [{"role": "robot", "parts": []}]}, 400), ({"contents": ["x"]}, 400)):
        with pytest.raises(BadRequest) as err:
            gemini.prepare(json.dumps(bad).encode(), Limits(), STREAM)
        assert err.value.status == status
    with pytest.raises(BadRequest) as err:
        gemini.prepare(b"{}", Limits(), "/v1beta/models/policy:countTokens")
    assert err.value.status == 404
    assert json.loads(gemini.gemini_error(429, "slow down", "rate")) == {
        "error": {"code": 429, "message": "rate: slow down", "status": "RESOURCE_EXHAUSTED"}}


def test_non_streamed_answer_with_tool_calls() -> None:
    upstream = fake.chat_json({"model": "policy", "return_token_ids": True, "logprobs": True})
    upstream["choices"][0]["message"]["tool_calls"] = [
        {"id": "chatcmpl-tool-1", "type": "function", "function": {"name": "get_weather",
                                                                   "arguments": '{"city": "Paris"}'}}]
    upstream["choices"][0]["finish_reason"] = "tool_calls"
    out = json.loads(gemini.client_body(json.dumps(upstream).encode(), PLAIN))
    (candidate,) = out["candidates"]
    assert candidate["content"] == {"role": "model", "parts": [
        {"text": "Hello, world!"}, {"functionCall": {"id": "chatcmpl-tool-1", "name": "get_weather",
                                                     "args": {"city": "Paris"}}}]}
    assert candidate["finishReason"] == "STOP" and "logprobsResult" not in candidate
    usage = upstream["usage"]
    assert out["usageMetadata"] == {"promptTokenCount": usage["prompt_tokens"],
                                    "candidatesTokenCount": usage["completion_tokens"],
                                    "totalTokenCount": usage["prompt_tokens"] + usage["completion_tokens"]}
    parsed = types.GenerateContentResponse.model_validate(out)  # what the official SDK reads
    assert parsed.text == "Hello, world!" and parsed.function_calls[0].args == {"city": "Paris"}  # type: ignore[index]
    wants = Prepared(body=b"", changed=True, wants_logprobs=True)
    chosen = json.loads(gemini.client_body(json.dumps(upstream).encode(), wants))["candidates"][0]
    assert len(chosen["logprobsResult"]["chosenCandidates"]) == len(fake.TOKENS)
    assert gemini.client_body(b'{"error": {"message": "x"}}', PLAIN) == b'{"error": {"message": "x"}}'
    upstream["choices"][0]["finish_reason"] = "length"
    assert json.loads(gemini.client_body(json.dumps(upstream).encode(), PLAIN))["candidates"][0]["finishReason"] == (
        "MAX_TOKENS")


@pytest.mark.parametrize("step", [0, 1, 7, 64])
def test_stream_text_then_function_calls_whole_at_the_end(step: int) -> None:
    raw = b"".join(tool_stream())
    stream, out = _translate(raw, step=step)
    assert stream.done
    chunks = _chunks(out)
    assert [c["candidates"][0]["content"]["parts"] for c in chunks[:-1]] == [[{"text": "Let me check."}]]
    final = chunks[-1]["candidates"][0]
    assert final["content"]["parts"] == [
        {"functionCall": {"id": "chatcmpl-tool-1", "name": "get_weather", "args": {"city": "Paris"}}},
        {"functionCall": {"id": "chatcmpl-tool-2", "name": "get_weather", "args": {"city": "Rome"}}}]
    assert final["finishReason"] == "STOP" and "finishReason" not in chunks[0]["candidates"][0]
    assert chunks[-1]["usageMetadata"] == {"promptTokenCount": 3, "candidatesTokenCount": 10, "totalTokenCount": 13}
    assert {c["responseId"] for c in chunks} == {"abc"} and {c["modelVersion"] for c in chunks} == {"policy"}
    for chunk in chunks:
        types.GenerateContentResponse.model_validate(chunk)
    assert b"token_ids" not in out and b"logprob" not in out


def test_stream_assembled_for_the_record() -> None:
    raw = b"".join(tool_stream())
    result = gemini.assemble(raw, True, PLAIN)
    assert result.complete and result.finish_reason == "tool_calls"
    assert result.prompt_token_ids == [1, 2, 3] and result.completion_token_ids == list(range(10, 20))
    assert result.completion_logprobs is not None and len(result.completion_logprobs) == 10
    parts = result.response["candidates"][0]["content"]["parts"]
    assert parts[0] == {"text": "Let me check."} and [p["functionCall"]["args"] for p in parts[1:]] == [
        {"city": "Paris"}, {"city": "Rome"}]
    plain = gemini.assemble(raw.replace(b"data: [DONE]\n\n", b""), True, PLAIN)
    assert not plain.complete  # no terminal event: incomplete
    upstream = json.dumps(fake.chat_json({"model": "m", "return_token_ids": True, "logprobs": True})).encode()
    single = gemini.assemble(upstream, False, PLAIN)
    assert single.completion_token_ids == fake.TOKENS and len(single.completion_logprobs or ()) == len(fake.TOKENS)
    assert single.response["candidates"][0]["content"]["parts"] == [{"text": "Hello, world!"}]


def test_stream_of_nothing_and_mid_stream_error() -> None:
    head = b'data: {"id":"chatcmpl-z","model":"policy","prompt_token_ids":[1],"choices":[{"index":0,' \
           b'"delta":{"role":"assistant","content":""},"token_ids":[],"finish_reason":null}]}\n\n'
    stop = b'data: {"id":"chatcmpl-z","model":"policy","choices":[{"index":0,"delta":{},"token_ids":[2],' \
           b'"finish_reason":"stop"}]}\n\n'
    stream, out = _translate(head + stop + b"data: [DONE]\n\n")
    (only,) = _chunks(out)
    assert stream.done and only["candidates"][0]["content"]["parts"] == [{"text": ""}]
    assert only["usageMetadata"] == {"promptTokenCount": 1, "candidatesTokenCount": 1, "totalTokenCount": 2}
    error = b'data: {"id":"chatcmpl-z","error":{"message":"boom","code":400}}\n\n'
    stream, out = _translate(head + error + b"data: [DONE]\n\n")
    assert stream.done and _chunks(out) == [{"error": {"code": 400, "message": "upstream_error: boom",
                                                       "status": "INVALID_ARGUMENT"}}]
    stream, out = _translate(head)
    assert not stream.done and out == b""
