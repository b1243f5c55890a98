"""Wire-format logic without a proxy: token-capture injection, stripping, SSE assembly, Anthropic translation
(the Responses translation: test_wire_responses.py)."""

from __future__ import annotations

import json

import pytest

from forge_cli.proxy.wire import anthropic, chat, sse
from forge_cli.proxy.wire.base import BadRequest, Limits, Prepared
from tests.proxy import fake_upstream as fake


def test_chat_fast_path_splices_capture_fields() -> None:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    prep = chat.prepare(body, Limits())
    forwarded = json.loads(prep.body)
    assert forwarded["return_token_ids"] is True and forwarded["logprobs"] is True
    assert forwarded["messages"] == [{"role": "user", "content": "hi"}]
    assert not prep.wants_logprobs and not prep.wants_token_ids
    assert json.loads(chat.prepare(b"{}", Limits()).body) == {"return_token_ids": True, "logprobs": True}


def test_chat_slow_path_clamps_and_remembers_what_client_asked() -> None:
    body = json.dumps({"model": "m", "messages": [], "max_tokens": 32000, "logprobs": True}).encode()
    prep = chat.prepare(body, Limits(max_output_tokens=8192))
    forwarded = json.loads(prep.body)  # duplicate keys: the appended (last) value wins, as in vLLM's parsing
    assert forwarded["max_tokens"] == 8192 and prep.wants_logprobs and not prep.wants_token_ids
    assert prep.body.startswith(body[:-1]) and prep.rewritten  # the client's bytes are kept, overrides appended
    plain = chat.prepare(json.dumps({"model": "m", "max_tokens": 10, "logprobs": False}).encode(), Limits(8192))
    assert json.loads(plain.body)["logprobs"] is True and not plain.rewritten and not plain.wants_logprobs


def test_chat_reads_limits_without_parsing() -> None:
    body = b'{"model": "m", "max_tokens": 32000, "messages": [{"role": "user", "content": "\\"max_tokens\\": 1"}]}'
    prep = chat.prepare(body, Limits(max_output_tokens=8192))
    assert json.loads(prep.body)["max_tokens"] == 8192 and prep.rewritten
    nested = json.dumps({"tools": [{"schema": {"n": 3}}], "max_tokens": 5, "n": 1}).encode()
    parsed = chat.prepare(nested, Limits(8192))  # two "n" keys: ambiguous, so parsed (top-level n=1 is fine)
    assert parsed.body.startswith(nested[:-1]) and json.loads(parsed.body)["return_token_ids"] is True


def test_chat_rejects_invalid_json_on_slow_path() -> None:
    try:
        chat.prepare(b'{"logprobs": true, oops}', Limits())
    except BadRequest as exc:
        assert exc.status == 400
    else:
        raise AssertionError("expected BadRequest")


def test_chat_stream_strip_and_assemble_across_chunk_boundaries() -> None:
    req = {"model": "m", "stream": True, "return_token_ids": True, "logprobs": True}
    raw = b"".join(fake.chat_events(req))
    prep = Prepared(body=b"", changed=True)
    stream = chat.ClientStream(prep)
    out = b"".join(stream.feed(raw[i:i + 7]) for i in range(0, len(raw), 7)) + stream.feed(b"")
    assert stream.done
    assert b"token_ids" not in out and b'"logprobs":{' not in out and out.endswith(b"data: [DONE]\n\n")
    assembled = chat.assemble(raw, True, prep)
    assert assembled.complete and assembled.completion_token_ids == fake.TOKENS
    assert assembled.prompt_token_ids == fake.PROMPT_IDS
    assert len(assembled.completion_logprobs or []) == len(fake.TOKENS)
    assert assembled.response["choices"][0]["message"]["content"] == "Hello, world!"


def test_chat_stream_without_done_is_incomplete() -> None:
    raw = b"".join(fake.chat_events({"model": "m", "stream": True, "return_token_ids": True})[:-1])
    assert not chat.assemble(raw, True, Prepared(body=b"", changed=True)).complete


def test_anthropic_request_translation() -> None:
    req = {
        "model": "policy", "max_tokens": 32000, "stream": True, "thinking": {"type": "enabled"},
        "system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=1"},
                   {"type": "text", "text": "You are helpful.", "cache_control": {"type": "ephemeral"}}],
        "tools": [{"name": "get_weather", "description": "w", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm"},
                                              {"type": "tool_use", "id": "t1", "name": "get_weather",
                                               "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "sunny"}]},
        ],
    }
    prep = anthropic.prepare(json.dumps(req).encode(), Limits(max_output_tokens=8192))
    out = json.loads(prep.body)
    assert out["max_tokens"] == 8192 and "thinking" not in out
    assert out["messages"][0] == {"role": "system", "content": "You are helpful."}
    assert out["messages"][2]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert out["messages"][3] == {"role": "tool", "tool_call_id": "t1", "content": "sunny"}
    assert out["tools"][0]["function"]["name"] == "get_weather" and out["return_token_ids"] is True


def test_anthropic_stream_translation_with_tool_call() -> None:
    req = {"model": "m", "stream": True, "return_token_ids": True, "logprobs": True,
           "tools": [{"type": "function", "function": {"name": "get_weather"}}]}
    chunk = {"id": "chatcmpl-1", "model": "m", "choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
        "finish_reason": "tool_calls", "token_ids": [5]}]}
    raw = b"".join(fake.chat_events(req)[:1]) + sse.encode(chunk) + b"data: [DONE]\n\n"
    stream = anthropic.ClientStream(Prepared(body=b"", changed=True))
    out = stream.feed(raw) + stream.feed(b"")
    names = [sse.parse_event(e)[0] for e in sse.iter_events(out)]
    assert names == ["message_start", "content_block_start", "content_block_delta", "content_block_stop",
                     "message_delta", "message_stop"]
    assert stream.done
    message = anthropic.assemble(raw, True, Prepared(body=b"", changed=True)).response
    assert message["content"][0]["type"] == "tool_use" and message["stop_reason"] == "tool_use"


def test_null_logprob_from_vllm_keeps_the_call() -> None:
    """vLLM streams ``"logprob": null`` for a non-finite value (seen with OpenClaw's real request on CPU float32):
    the call keeps its token ids, that logprob is NaN."""
    req = {"model": "m", "stream": True, "return_token_ids": True, "logprobs": True}
    raw = b"".join(fake.chat_events(req)).replace(b'"logprob":-0.5', b'"logprob":null', 1)  # compact, as vLLM's
    assert b'"logprob":null' in raw
    assembled = chat.assemble(raw, True, Prepared(body=b"", changed=True))
    assert assembled.complete and assembled.completion_token_ids == fake.TOKENS
    values = assembled.completion_logprobs or []
    assert len(values) == len(fake.TOKENS) and sum(v != v for v in values) == 1


@pytest.mark.parametrize("body", [b"{}", b'{"model": "m", "messages": []}', b'{"logprobs": false, "messages": []}'])
def test_missing_output_limit_gets_the_cap(body: bytes) -> None:
    """Without max_tokens vLLM generates to the end of the context (mini-swe-agent, Codex, Gemini CLI send none)."""
    sent = json.loads(chat.prepare(body, Limits(max_output_tokens=64)).body)
    assert sent["max_tokens"] == 64 and sent["return_token_ids"] is True
    assert "max_tokens" not in json.loads(chat.prepare(body, Limits()).body)  # no cap configured: left alone
    obj = json.loads(body)
    assert json.loads(chat.prepare_object(obj, Limits(max_output_tokens=64)).body)["max_tokens"] == 64


def test_client_limit_is_kept_when_under_the_cap() -> None:
    sent = json.loads(chat.prepare(b'{"max_completion_tokens": 10}', Limits(max_output_tokens=64)).body)
    assert sent["max_completion_tokens"] == 10 and "max_tokens" not in sent
