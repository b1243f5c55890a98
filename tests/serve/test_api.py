"""The real vLLM server on the default model, through the official openai and anthropic SDKs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from forge_cli.serve import PolicyServer, health

pytestmark = pytest.mark.vllm

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
BASH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command and return its output.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string", "description": "the command"}},
                       "required": ["command"]},
    },
}


def _openai(server: PolicyServer) -> Any:
    import openai

    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120)


def test_server_is_healthy_on_loopback(policy_server: PolicyServer) -> None:
    assert policy_server.url.startswith("http://127.0.0.1:")
    assert health(policy_server.url)
    models = _openai(policy_server).models.list()
    assert [m.id for m in models.data] == [policy_server.model]


def test_chat_completion(policy_server: PolicyServer) -> None:
    reply = _openai(policy_server).chat.completions.create(
        model=policy_server.model, messages=QUESTION, max_tokens=12, temperature=0)
    assert "Paris" in (reply.choices[0].message.content or "")
    assert reply.usage is not None and reply.usage.completion_tokens > 0


def test_streamed_chat_completion(policy_server: PolicyServer) -> None:
    stream = _openai(policy_server).chat.completions.create(
        model=policy_server.model, messages=QUESTION, max_tokens=12, temperature=0, stream=True)
    pieces, finish = [], None
    for chunk in stream:
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
    assert len(pieces) > 2
    assert "Paris" in "".join(pieces)
    assert finish in {"stop", "length"}


def test_responses_api(policy_server: PolicyServer) -> None:
    response = _openai(policy_server).responses.create(
        model=policy_server.model, input="What is the capital of France?", max_output_tokens=16, temperature=0)
    assert response.status == "completed"
    assert "Paris" in response.output_text


def test_anthropic_messages(policy_server: PolicyServer) -> None:
    import anthropic

    client = anthropic.Anthropic(base_url=policy_server.url, api_key="unused", max_retries=0, timeout=120)
    # this SDK version has no temperature argument; vLLM reads it from the body
    message = client.messages.create(model=policy_server.model, max_tokens=16, messages=QUESTION,
                                     extra_body={"temperature": 0})
    text = "".join(block.text for block in message.content if block.type == "text")
    assert "Paris" in text
    assert message.stop_reason in {"end_turn", "max_tokens"}


def test_request_with_bash_tool_is_accepted(policy_server: PolicyServer) -> None:
    reply = _openai(policy_server).chat.completions.create(
        model=policy_server.model, messages=[{"role": "user", "content": "Which files are in /tmp?"}],
        tools=[BASH_TOOL], max_tokens=24, temperature=0)
    assert reply.choices[0].finish_reason in {"stop", "length", "tool_calls"}


def _few_shot() -> list[dict[str, Any]]:
    """A conversation in which the assistant has answered three shell requests with bash calls."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You run shell commands for the user by calling the bash tool."}]
    for i, (command, output) in enumerate([("date", "Mon Nov 30 04:40:00 UTC 2026"), ("pwd", "/work"),
                                           ("whoami", "root")]):
        messages.append({"role": "user", "content": f"Run the command: {command}"})
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{i}", "type": "function",
             "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]})
        messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": output})
    messages.append({"role": "user", "content": "Run the command: ls"})
    return messages


def test_engineered_prompt_yields_parsed_tool_call(policy_server: PolicyServer) -> None:
    """SmolLM2-135M is weak: with a few-shot history it calls the tool in ~half of the samples."""
    reply = _openai(policy_server).chat.completions.create(
        model=policy_server.model, messages=_few_shot(), tools=[BASH_TOOL], max_tokens=32, temperature=0.7,
        n=12, seed=1234)
    calls = [call for choice in reply.choices for call in (choice.message.tool_calls or [])]
    assert calls, [choice.message.content for choice in reply.choices]
    assert all(call.function.name == "bash" for call in calls)
    arguments = [json.loads(call.function.arguments) for call in calls]
    assert any(a.get("command", "").startswith("ls") for a in arguments), arguments
    finished = [choice.finish_reason for choice in reply.choices if choice.message.tool_calls]
    assert "tool_calls" in finished


def test_streamed_tool_call(policy_server: PolicyServer) -> None:
    """The same call arrives as streamed tool-call deltas (what harnesses that stream parse)."""
    client = _openai(policy_server)
    for seed in range(6):
        stream = client.chat.completions.create(
            model=policy_server.model, messages=_few_shot(), tools=[BASH_TOOL], max_tokens=40, temperature=0.7,
            seed=seed, stream=True)
        names, arguments, finish = [], "", None
        for chunk in stream:
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            for call in delta.tool_calls or []:
                if call.function and call.function.name:
                    names.append(call.function.name)
                arguments += (call.function.arguments or "") if call.function else ""
            finish = chunk.choices[0].finish_reason or finish
        if names:
            assert names == ["bash"]
            assert "command" in json.loads(arguments)
            assert finish == "tool_calls"
            return
    pytest.fail("no streamed tool call in 6 samples")


def test_return_token_ids_detokenise_to_the_text(policy_server: PolicyServer) -> None:
    import httpx

    body = {"model": policy_server.model, "messages": QUESTION, "max_tokens": 16, "temperature": 0,
            "return_token_ids": True}
    data = httpx.post(policy_server.base_url + "/chat/completions", json=body, timeout=120).json()
    prompt_ids, choice = data["prompt_token_ids"], data["choices"][0]
    completion_ids, text = choice["token_ids"], choice["message"]["content"]
    assert prompt_ids and completion_ids
    assert len(completion_ids) == data["usage"]["completion_tokens"]
    assert len(prompt_ids) == data["usage"]["prompt_tokens"]

    def detokenize(ids: list[int]) -> str:
        response = httpx.post(policy_server.url + "/detokenize", json={"model": policy_server.model, "tokens": ids},
                              timeout=60)
        response.raise_for_status()
        return str(response.json()["prompt"])

    decoded = detokenize(completion_ids)
    # the completion ends with the end-of-turn token, which the message text leaves out
    assert decoded.removesuffix("<|im_end|>") == text
    prompt = detokenize(prompt_ids)
    assert prompt.startswith("<|im_start|>system\n")
    assert prompt.endswith("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n")
