"""The proxy names each call's rollout to its upstream (``x-forge-rollout``) only when asked to (a replay upstream
answers by rollout), and a client's own ``x-forge-rollout`` never reaches the upstream either way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from forge_cli.proxy.launcher import start_proxy
from tests.helpers import QuietHandler, serve_http

pytestmark = pytest.mark.mitm


class Capture(QuietHandler):
    """An upstream that keeps each call's x-forge-rollout header and answers like vLLM (ids for every word)."""

    seen: list[str | None] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        type(self).seen.append(self.headers.get("x-forge-rollout"))
        words = " ".join(str(m.get("content")) for m in body.get("messages", [])).split()
        answer = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
                  "prompt_token_ids": list(range(len(words) + 8)),
                  "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "token_ids": [7],
                               "logprobs": {"content": [{"token": "ok", "logprob": -0.1, "top_logprobs": []}]},
                               "finish_reason": "stop"}],
                  "usage": {"prompt_tokens": len(words) + 8, "completion_tokens": 1}}
        self.reply(200, json.dumps(answer).encode())


@pytest.mark.parametrize("named", [False, True])
def test_the_rollout_is_named_upstream_only_when_asked(tmp_path: Path, named: bool) -> None:
    handler: Any = type("C", (Capture,), {"seen": []})
    server, url = serve_http(handler)
    proxy = start_proxy(url, store=tmp_path / "traces.sqlite", max_output_tokens=64, rollout_header=named)
    try:
        rollout = proxy.register(rollout_id="r-named", task="t")
        answer = httpx.post(f"{rollout['base_url']}/v1/chat/completions", timeout=30,
                            headers={"authorization": f"Bearer {rollout['key']}", "x-forge-rollout": "someone-else"},
                            json={"model": "m", "messages": [{"role": "user", "content": "hello there"}]})
        assert answer.status_code == 200, answer.text
    finally:
        proxy.stop()
        server.shutdown()
    assert handler.seen == (["r-named"] if named else [None])
