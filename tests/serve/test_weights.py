"""Weight updates on the running server: answers change, the version is visible, nothing in flight is lost.

The update swaps the weights of the session's shared server, so the test puts the original weights
back at the end (the version counter keeps counting: other tests must not rely on its value).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from forge_cli.errors import UserError
from forge_cli.paths import env_python
from forge_cli.serve import PolicyServer, update_weights, weight_version

PROMPT = [{"role": "user", "content": "What is the capital of France?"}]
LONG = [{"role": "user", "content": "Write a long story about a dragon who learns to cook."}]
# Long enough that the update's pause (mode=wait) has to drain it even on an AVX512/AMX machine, where
# 48 tokens finished before the pause and left a paused window too short to poll (CI, stop 42).
LONG_TOKENS = 160


def _chat(server: PolicyServer, messages: list[dict[str, str]], max_tokens: int = 12,
          ignore_eos: bool = False) -> dict[str, Any]:
    body = {"model": server.model, "messages": messages, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": ignore_eos}
    response = httpx.post(server.base_url + "/chat/completions", json=body, timeout=300)
    response.raise_for_status()
    return dict(response.json())


def _text(reply: dict[str, Any]) -> str:
    return str(reply["choices"][0]["message"]["content"])


def test_update_weights_rejects_a_missing_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such directory"):
        update_weights("http://127.0.0.1:9", tmp_path / "nope")
    with pytest.raises(UserError, match=r"config\.json"):
        update_weights("http://127.0.0.1:9", tmp_path)


@pytest.mark.vllm
def test_weight_update_changes_answers_and_keeps_in_flight_requests(
        policy_server: PolicyServer, tmp_path: Path) -> None:
    original = policy_server.launch.model_path
    changed = tmp_path / "perturbed"
    subprocess.run([str(env_python("vllm")), str(Path(__file__).with_name("perturb_checkpoint.py")),
                    str(original), str(changed)], check=True, capture_output=True, timeout=300)
    before_version = weight_version(policy_server)
    before = _text(_chat(policy_server, PROMPT))
    assert "Paris" in before

    # A long generation is in flight when the update starts; another request arrives mid-update.
    results: dict[str, Any] = {}
    first_chunk = threading.Event()

    def stream_long() -> None:
        body = {"model": policy_server.model, "messages": LONG, "max_tokens": LONG_TOKENS, "temperature": 0,
                "ignore_eos": True, "stream": True, "return_token_ids": True}
        pieces, token_ids, finish = [], [], None
        with httpx.stream("POST", policy_server.base_url + "/chat/completions", json=body, timeout=300) as response:
            for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                for choice in chunk.get("choices", []):
                    pieces.append(choice["delta"].get("content") or "")
                    token_ids += choice.get("token_ids") or []
                    finish = choice.get("finish_reason") or finish
                first_chunk.set()
        results["long"] = ("".join(pieces), token_ids, finish)

    def late_request() -> None:
        results["paused_when_sent"] = httpx.get(policy_server.url + "/is_paused", timeout=30).json()["is_paused"]
        results["late"] = _text(_chat(policy_server, PROMPT))

    def update() -> None:
        started = time.monotonic()
        results["version"] = update_weights(policy_server, changed)
        results["update_s"] = time.monotonic() - started

    long_thread = threading.Thread(target=stream_long)
    long_thread.start()
    assert first_chunk.wait(120), "the long request never started streaming"
    update_thread = threading.Thread(target=update)
    update_thread.start()
    late_thread = None
    # Send the late request while the server is paused for the update. /pause?mode=wait may report paused
    # only once the long request has drained, which takes seconds on a slow machine (a count of 100 polls
    # ran out first in CI): poll until the update ends.
    deadline = time.monotonic() + 300
    with httpx.Client(timeout=30) as poll:
        while time.monotonic() < deadline:
            if poll.get(policy_server.url + "/is_paused").json()["is_paused"]:
                late_thread = threading.Thread(target=late_request)
                late_thread.start()
                break
            if not update_thread.is_alive():
                break
            time.sleep(0.005)
    for thread in (long_thread, update_thread, late_thread):
        if thread is not None:
            thread.join(300)
    try:
        # the in-flight request was neither lost nor cut short: it ran to its token limit
        text, token_ids, finish = results["long"]
        assert finish == "length" and len(token_ids) == LONG_TOKENS, results["long"]
        new_version = results["version"]
        assert new_version != before_version
        assert weight_version(policy_server) == new_version
        after = _text(_chat(policy_server, PROMPT))
        assert after != before and "Paris" not in after
        # /pause?mode=wait pauses admission at once and drains: the late request was held, not refused,
        # and then answered by the new weights
        assert late_thread is not None, "the server never reported itself paused during the update"
        assert results["paused_when_sent"] is True
        assert results["late"] == after
    finally:
        restored_version = update_weights(policy_server, original)
    assert restored_version != new_version
    assert weight_version(policy_server) == restored_version
    assert _text(_chat(policy_server, PROMPT)) == before
    # the long request's text is what the original weights generate for it alone
    assert text == _text(_chat(policy_server, LONG, max_tokens=LONG_TOKENS, ignore_eos=True))
