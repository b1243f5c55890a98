"""The session's policy server answers through the official openai SDK."""

from __future__ import annotations

import pytest

from forge_cli.serve import PolicyServer, health


@pytest.mark.vllm
def test_policy_server_answers(policy_server: PolicyServer) -> None:
    import openai

    assert policy_server.url.startswith("http://127.0.0.1:")
    assert health(policy_server.url)
    client = openai.OpenAI(base_url=policy_server.url + "/v1", api_key="unused")
    reply = client.chat.completions.create(
        model=policy_server.model, messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=12, temperature=0,
    )
    assert "Paris" in (reply.choices[0].message.content or "")
