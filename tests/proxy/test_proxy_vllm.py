"""Acceptance against the real policy server (vLLM CPU on the default model), official SDKs as clients."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from google import genai
from google.genai import types

from forge_cli.proxy.launcher import ProxyHandle, start_proxy
from forge_cli.proxy.wire import sse
from tests.proxy.conftest import need_mitmdump

pytestmark = [pytest.mark.vllm, pytest.mark.mitm]
ASK = "What is the capital of France? Answer in one word."
TOOL_ASK = "What is the weather in Paris? Use the get_weather tool."
OA_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
RESP_TOOL = {"type": "function", "name": "get_weather", "description": "Weather for a city.",
             "parameters": OA_TOOL["function"]["parameters"]}  # type: ignore[index]
AN_TOOL = {"name": "get_weather", "description": "Weather for a city.",
           "input_schema": OA_TOOL["function"]["parameters"]}  # type: ignore[index]
# as Google's SDKs send a declaration: Gemini's own schema dialect, upper-case types
GM_TOOL = types.Tool(function_declarations=[types.FunctionDeclaration(
    name="get_weather", description="Weather for a city.",
    parameters=types.Schema(type=types.Type.OBJECT, properties={"city": types.Schema(type=types.Type.STRING)},
                            required=["city"]))])
MAX = 24
CODEX = Path(__file__).resolve().parents[1] / "fixtures" / "harness_requests" / "codex.json"
GEMINI_CLI = CODEX.with_name("gemini-cli.json")


@pytest.fixture(scope="module")
def vproxy(policy_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyHandle]:
    need_mitmdump()
    handle = start_proxy(policy_server.url, store=tmp_path_factory.mktemp("vproxy") / "t.sqlite",
                         weight_version="w-1")
    yield handle
    handle.stop()


def _chat(client: openai.OpenAI, model: str, stream: bool, tools: bool) -> str:
    kw: dict[str, Any] = {"tools": [OA_TOOL]} if tools else {}
    msgs = [{"role": "user", "content": TOOL_ASK if tools else ASK}]
    if not stream:
        msg = client.chat.completions.create(model=model, messages=msgs, max_tokens=MAX, temperature=0, **kw)  # type: ignore[arg-type]
        return (msg.choices[0].message.content or "") + "".join(
            t.function.arguments for t in msg.choices[0].message.tool_calls or ())  # type: ignore[union-attr]
    out = []
    for chunk in client.chat.completions.create(model=model, messages=msgs, max_tokens=MAX, temperature=0,  # type: ignore[arg-type]
                                                stream=True, **kw):
        for choice in chunk.choices:
            out.append(choice.delta.content or "")
            out += [t.function.arguments or "" for t in choice.delta.tool_calls or () if t.function]
    return "".join(out)


def _responses(client: openai.OpenAI, model: str, stream: bool, tools: bool) -> str:
    kw: dict[str, Any] = {"tools": [RESP_TOOL]} if tools else {}
    text = TOOL_ASK if tools else ASK
    if not stream:
        resp = client.responses.create(model=model, input=text, max_output_tokens=MAX, temperature=0, **kw)
        return resp.output_text + "".join(getattr(i, "arguments", "") or "" for i in resp.output)
    events = list(client.responses.create(model=model, input=text, max_output_tokens=MAX, temperature=0,
                                          stream=True, **kw))
    final = next(e for e in events if e.type in ("response.completed", "response.incomplete"))
    return final.response.output_text + "".join(getattr(i, "arguments", "") or "" for i in final.response.output)


def _messages(client: anthropic.Anthropic, model: str, stream: bool, tools: bool) -> str:
    kw: dict[str, Any] = {"tools": [AN_TOOL]} if tools else {}
    msgs = [{"role": "user", "content": TOOL_ASK if tools else ASK}]
    if not stream:
        msg = client.messages.create(model=model, max_tokens=MAX, messages=msgs, extra_body={"temperature": 0}, **kw)  # type: ignore[arg-type]
    else:
        with client.messages.stream(model=model, max_tokens=MAX, messages=msgs, extra_body={"temperature": 0},
                                    **kw) as s:  # type: ignore[arg-type]
            msg = s.get_final_message()
    return "".join(getattr(b, "text", "") or str(getattr(b, "input", "")) for b in msg.content)


def _gemini_client(r: dict[str, Any]) -> genai.Client:
    return genai.Client(api_key=r["key"], http_options=types.HttpOptions(base_url=r["base_url"], timeout=300_000))


def _gemini(client: genai.Client, model: str, stream: bool, tools: bool) -> str:
    config = types.GenerateContentConfig(max_output_tokens=MAX, temperature=0, tools=[GM_TOOL] if tools else None,
                                         automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
    text = TOOL_ASK if tools else ASK
    chunks = (list(client.models.generate_content_stream(model=model, contents=text, config=config)) if stream
              else [client.models.generate_content(model=model, contents=text, config=config)])
    return "".join((c.text or "") + "".join(json.dumps(f.args) for f in c.function_calls or ()) for c in chunks)


@pytest.mark.parametrize("fmt", ["chat", "responses", "anthropic", "gemini"])
def test_formats_streamed_and_not_with_and_without_tools(vproxy: ProxyHandle, policy_server: Any, fmt: str) -> None:
    r = vproxy.register(task=f"acceptance-{fmt}", harness="sdk")
    combos = [(s, t) for t in (False, True) for s in (False, True)]
    answers = []
    for stream, tools in combos:
        if fmt == "anthropic":
            client: Any = anthropic.Anthropic(base_url=r["base_url"], api_key=r["key"], max_retries=0, timeout=300)
            answers.append(_messages(client, policy_server.model, stream, tools))
        elif fmt == "gemini":
            answers.append(_gemini(_gemini_client(r), policy_server.model, stream, tools))
        else:
            client = openai.OpenAI(base_url=r["base_url"] + "/v1", api_key=r["key"], max_retries=0, timeout=300)
            answers.append((_chat if fmt == "chat" else _responses)(client, policy_server.model, stream, tools))
    assert "paris" in answers[0].lower() and "paris" in answers[1].lower(), answers
    calls = vproxy.calls(r["rollout_id"])
    assert len(calls) == 4
    for call, (stream, tools), answer in zip(calls, combos, answers, strict=True):
        assert call["status"] == "ok", call["error"]
        assert call["wire_format"] == fmt and call["stream"] == stream
        assert call["weight_version"] == "w-1"
        assert call["request"] and call["response"]
        assert call["prompt_token_ids"] and call["completion_token_ids"], call
        # every format is served through Chat Completions: a logprob for every sampled token, tool calls too
        assert len(call["completion_logprobs"]) == len(call["completion_token_ids"])
        if fmt != "chat":
            assert call["upstream_request"]["messages"] and call["upstream_request"]["return_token_ids"] is True
        if fmt == "responses":
            assert call["response"]["object"] == "response" and call["response"]["output"]
        if fmt == "gemini":
            assert call["response"]["candidates"][0]["content"]["role"] == "model"
            assert call["response"]["usageMetadata"]["candidatesTokenCount"] == len(call["completion_token_ids"])
            if tools:  # Gemini's OBJECT/STRING reached vLLM as JSON Schema
                assert call["upstream_request"]["tools"][0]["function"]["parameters"]["type"] == "object"
        assert all(lp <= 0 for lp in call["completion_logprobs"])
        assert bool(call["request"].get("tools")) == tools
        assert answer.strip()


def test_overrides_win_and_clamp(policy_server: Any, tmp_path: Path) -> None:
    """Appended capture/clamp fields override the client's own (duplicate keys: the last wins in vLLM)."""
    need_mitmdump()
    with start_proxy(policy_server.url, store=tmp_path / "t.sqlite", max_output_tokens=6) as proxy:
        r = proxy.register(task="overrides")
        client = openai.OpenAI(base_url=r["base_url"] + "/v1", api_key=r["key"], max_retries=0, timeout=300)
        reply = client.chat.completions.create(model=policy_server.model, max_tokens=100000, logprobs=False,
                                               messages=[{"role": "user", "content": "Write a long story."}])
        assert reply.choices[0].logprobs is None and reply.choices[0].finish_reason == "length"
        (call,) = proxy.calls(r["rollout_id"])
    assert call["status"] == "ok" and call["request"]["max_tokens"] == 100000
    assert call["upstream_request"]["max_tokens"] == 6 and call["upstream_request"]["logprobs"] is True
    assert len(call["completion_logprobs"]) == len(call["completion_token_ids"]) == 6


def test_multi_turn_prefix_merging(vproxy: ProxyHandle, policy_server: Any, capsys: pytest.CaptureFixture[str]) -> None:
    r = vproxy.register(task="multi-turn", harness="sdk")
    client = openai.OpenAI(base_url=r["base_url"] + "/v1", api_key=r["key"], max_retries=0, timeout=300)
    messages: list[dict[str, str]] = [{"role": "system", "content": "You are a concise assistant."}]
    for question in ("Name a fruit.", "Name a colour.", "Name an animal.", "Name a country."):
        messages.append({"role": "user", "content": question})
        reply = client.chat.completions.create(model=policy_server.model, messages=messages, max_tokens=12,  # type: ignore[arg-type]
                                               temperature=0)
        messages.append({"role": "assistant", "content": reply.choices[0].message.content or ""})
    calls = vproxy.calls(r["rollout_id"])
    assert len(calls) == 4
    merges = 0
    for prev, cur in itertools.pairwise(calls):
        history = prev["prompt_token_ids"] + prev["completion_token_ids"]
        assert cur["prompt_token_ids"][:len(prev["prompt_token_ids"])] == prev["prompt_token_ids"]
        merges += cur["prompt_token_ids"][:len(history)] == history
    with capsys.disabled():
        print(f"\n[multi-turn] {merges} of 3 consecutive calls merge (prompt starts with previous prompt+completion)")
    assert merges >= 0


@pytest.mark.e2e  # Codex's recorded request prefilled on CPU (~60 s): make test-e2e, keeping make test under 40 min
def test_codex_request_through_responses_translation(vproxy: ProxyHandle, policy_server: Any,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Codex's recorded first request (its own prompt and tools) as Codex sends it, plus an output limit: the SSE
    answer is the Responses event sequence Codex reads, the record token-exact."""
    r = vproxy.register(task="codex-fixture", harness="codex")
    body = {**json.loads(CODEX.read_text())["body"], "model": policy_server.model, "max_output_tokens": MAX}
    with httpx.stream("POST", r["base_url"] + "/v1/responses", json=body, timeout=600,
                      headers={"authorization": f"Bearer {r['key']}", "accept": "text/event-stream"}) as resp:
        assert resp.status_code == 200, resp.read()
        raw = b"".join(resp.iter_bytes())
    events = [json.loads(sse.parse_event(e)[1]) for e in sse.iter_events(raw)]
    kinds = [e["type"] for e in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-1] == "response.completed" and kinds.count("response.output_item.added") == kinds.count(
        "response.output_item.done")
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    final = events[-1]["response"]
    assert final["usage"]["total_tokens"] == final["usage"]["input_tokens"] + final["usage"]["output_tokens"]
    (call,) = vproxy.calls(r["rollout_id"])
    assert call["status"] == "ok" and call["wire_format"] == "responses" and call["response"] == final
    assert len(call["completion_logprobs"]) == len(call["completion_token_ids"]) == final["usage"]["output_tokens"]
    assert len(call["prompt_token_ids"]) == final["usage"]["input_tokens"]
    with capsys.disabled():
        print(f"\n[codex fixture] {len(call['prompt_token_ids'])} prompt tokens, output items "
              f"{[i['type'] for i in final['output']]}, finish {call['finish_reason']}")


def test_responses_function_call_round_trip(vproxy: ProxyHandle, policy_server: Any) -> None:
    """A forced tool call streamed to the SDK's strict stream reader, its items sent back with the tool's output
    (as Codex does): both calls recorded token-exact, the second prompt extends the first."""
    r = vproxy.register(task="responses-tools", harness="sdk")
    client = openai.OpenAI(base_url=r["base_url"] + "/v1", api_key=r["key"], max_retries=0, timeout=300)
    history: list[Any] = [{"role": "user", "content": TOOL_ASK}]
    with client.responses.stream(model=policy_server.model, input=history, tools=[RESP_TOOL],  # type: ignore[call-overload]
                                 tool_choice="required", max_output_tokens=48, temperature=0) as stream:
        first = stream.get_final_response()
    calls = [item for item in first.output if item.type == "function_call"]
    assert calls and calls[0].name == "get_weather" and json.loads(calls[0].arguments)
    history += [item.model_dump(exclude_none=True) for item in first.output]
    history += [{"type": "function_call_output", "call_id": c.call_id, "output": "sunny, 21 C"} for c in calls]
    second = client.responses.create(model=policy_server.model, input=history, tools=[RESP_TOOL],  # type: ignore[list-item]
                                      max_output_tokens=MAX, temperature=0)
    assert second.status in ("completed", "incomplete")
    one, two = vproxy.calls(r["rollout_id"])
    for call in (one, two):
        assert call["status"] == "ok" and len(call["completion_logprobs"]) == len(call["completion_token_ids"])
    assert one["finish_reason"] in ("tool_calls", "stop") and one["response"]["output"][-1]["type"] == "function_call"
    assert two["prompt_token_ids"][:len(one["prompt_token_ids"])] == one["prompt_token_ids"]
    assert two["upstream_request"]["messages"][-1]["role"] == "tool"


@pytest.mark.e2e  # a second vLLM server at 32,768 tokens and an 11,000-token prefill: ~2.5 min on 2 cores
def test_gemini_cli_request_through_gemini_translation(long_context_server: Any, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Gemini CLI's recorded first request (its own prompt and 16 function declarations, ~11,000 tokens: served at
    32,768) as it sends it, plus an output limit: the answer is the alt=sse chunk sequence the CLI reads, the
    record token-exact."""
    need_mitmdump()
    with start_proxy(long_context_server.url, store=tmp_path / "t.sqlite") as vproxy:
        _gemini_cli_request(vproxy, long_context_server, capsys)


def _gemini_cli_request(vproxy: ProxyHandle, policy_server: Any, capsys: pytest.CaptureFixture[str]) -> None:
    r = vproxy.register(task="gemini-cli-fixture", harness="gemini-cli")
    fixture = json.loads(GEMINI_CLI.read_text())
    body = {**fixture["body"], "generationConfig": {**fixture["body"]["generationConfig"], "maxOutputTokens": MAX}}
    path = f"/v1beta/models/{policy_server.model}:streamGenerateContent?alt=sse"
    with httpx.stream("POST", r["base_url"] + path, json=body, timeout=600,
                      headers={"x-goog-api-key": r["key"]}) as resp:
        assert resp.status_code == 200, resp.read()
        assert resp.headers["content-type"].startswith("text/event-stream")
        raw = b"".join(resp.iter_bytes())
    chunks = [json.loads(sse.parse_event(e)[1]) for e in sse.iter_events(raw)]
    for chunk in chunks:
        types.GenerateContentResponse.model_validate(chunk)
    final = chunks[-1]
    assert final["candidates"][0]["finishReason"] in ("STOP", "MAX_TOKENS")
    assert all("finishReason" not in c["candidates"][0] for c in chunks[:-1])
    (call,) = vproxy.calls(r["rollout_id"])
    assert call["status"] == "ok" and call["wire_format"] == "gemini" and call["stream"]
    usage = final["usageMetadata"]
    assert len(call["completion_logprobs"]) == len(call["completion_token_ids"]) == usage["candidatesTokenCount"]
    assert len(call["prompt_token_ids"]) == usage["promptTokenCount"]
    assert call["upstream_request"]["max_tokens"] == MAX and len(call["upstream_request"]["tools"]) == len(
        body["tools"][0]["functionDeclarations"])
    with capsys.disabled():
        print(f"\n[gemini-cli fixture] {len(call['prompt_token_ids'])} prompt tokens, "
              f"{len(chunks)} chunks, finish {call['finish_reason']}")


def test_gemini_function_call_round_trip(vproxy: ProxyHandle, policy_server: Any) -> None:
    """A forced function call (toolConfig ANY) through the official SDK, streamed; its content sent back with the
    function's response (as Gemini CLI does): both calls token-exact, the second prompt extends the first."""
    r = vproxy.register(task="gemini-tools", harness="sdk")
    client = _gemini_client(r)
    forced = types.ToolConfig(function_calling_config=types.FunctionCallingConfig(
        mode=types.FunctionCallingConfigMode.ANY, allowed_function_names=["get_weather"]))
    config = types.GenerateContentConfig(max_output_tokens=48, temperature=0, tools=[GM_TOOL], tool_config=forced,
                                         automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
    history: list[types.Content] = [types.Content(role="user", parts=[types.Part(text=TOOL_ASK)])]
    chunks = list(client.models.generate_content_stream(model=policy_server.model, contents=history,  # type: ignore[arg-type]
                                                        config=config))
    calls = [f for c in chunks for f in c.function_calls or ()]
    assert calls and calls[0].name == "get_weather" and isinstance(calls[0].args, dict)
    history.append(types.Content(role="model", parts=[types.Part(function_call=f) for f in calls]))
    history.append(types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
        id=f.id, name=f.name, response={"output": "sunny, 21 C"})) for f in calls]))
    second = client.models.generate_content(model=policy_server.model, contents=history,  # type: ignore[arg-type]
                                            config=types.GenerateContentConfig(max_output_tokens=MAX, temperature=0,
                                                                               tools=[GM_TOOL]))
    assert second.candidates and second.candidates[0].finish_reason in (types.FinishReason.STOP,
                                                                        types.FinishReason.MAX_TOKENS)
    one, two = vproxy.calls(r["rollout_id"])
    for call in (one, two):
        assert call["status"] == "ok" and len(call["completion_logprobs"]) == len(call["completion_token_ids"])
    # a named tool choice is decoded under a schema: vLLM then reports "stop"
    assert one["finish_reason"] in ("tool_calls", "stop") and one["upstream_request"]["tool_choice"] == {
        "type": "function", "function": {"name": "get_weather"}}
    assert two["prompt_token_ids"][:len(one["prompt_token_ids"])] == one["prompt_token_ids"]
    messages = two["upstream_request"]["messages"]
    assert messages[-1] == {"role": "tool", "tool_call_id": calls[0].id, "content": "sunny, 21 C"}
    assert messages[-2]["tool_calls"][0]["id"] == calls[0].id
