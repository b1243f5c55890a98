"""End to end: OpenClaw's own browser tool on the rollout's browser (``harness.browser=native``).

The real OpenClaw (its bundle) runs MiniWoB++'s ``click-button`` through forge eval and the capture proxy, against a
scripted policy server (OpenAI-compatible, streamed) that plays the right moves through OpenClaw's tool catalog:
``tool_call`` of ``browser`` with ``action: snapshot`` on the page forge opened, then ``action: act, kind: click``
on the ref of the button the utterance names. The page's own reward is 1: OpenClaw attached to the rollout's Chromium
(attachOnly, over CDP) and acted on forge's page; forge's MCP browser tools were not offered besides.

Measured here: ~40 s (OpenClaw's start dominates). Needs the openclaw bundle (``forge harness install openclaw``,
678 MB) and ``scripts/setup.sh web``.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from forge_cli.config.compose import compose
from forge_cli.harness.bundle_paths import is_installed
from tests.helpers import REPO, QuietHandler, serve_http

pytestmark = [pytest.mark.e2e, pytest.mark.mitm]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return " ".join(str(p.get("text", "")) for p in content or [] if isinstance(p, dict))


def _tool_call(arguments: dict[str, Any], n: int) -> dict[str, Any]:
    return {"index": 0, "id": f"call_{n}", "type": "function",
            "function": {"name": "tool_call", "arguments": json.dumps({"id": "browser", "args": arguments})}}


def scripted_move(messages: list[dict[str, Any]], log: list[str]) -> dict[str, Any]:
    """The next assistant message: snapshot, then click the named button, then a final answer."""
    # tool results reach the model as JSON text inside OpenClaw's untrusted-content wrapper: quotes escaped
    results = [_text(m.get("content")).replace('\\"', '"') for m in messages if m.get("role") == "tool"]
    task = next((_text(m.get("content")) for m in messages if m.get("role") == "user"), "")
    if not results:
        return {"tool_calls": [_tool_call({"action": "snapshot"}, 1)]}
    if len(results) == 1:
        wanted = re.search(r'Click on the "([^"]+)" button', task)
        ref = re.search(r'button "' + re.escape(wanted.group(1)) + r'"[^\n]*?\[ref=(\w+)\]', results[0]) \
            if wanted else None
        log.append(f"task utterance: {wanted.group(0) if wanted else None}; snapshot: {results[0][-4000:]}")
        if ref is None:
            return {"content": "I could not find the button."}
        return {"tool_calls": [_tool_call({"action": "act", "kind": "click", "ref": ref.group(1)}, 2)]}
    log.append(f"click result: {results[-1][:500]}")
    return {"content": "Clicked it."}


def _policy(log: list[str]) -> type[QuietHandler]:
    class Policy(QuietHandler):
        def do_GET(self) -> None:
            self.reply(200, json.dumps({"object": "list", "data": [{"id": "policy", "object": "model"}]}).encode())

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            move = scripted_move(body.get("messages") or [], log)
            finish = "tool_calls" if "tool_calls" in move else "stop"
            usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
            if not body.get("stream"):
                message = {"role": "assistant", "content": move.get("content"), **move}
                self.reply(200, json.dumps({"id": "c", "object": "chat.completion", "model": "policy", "usage": usage,
                                            "choices": [{"index": 0, "message": message,
                                                         "finish_reason": finish}]}).encode())
                return
            chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant", **move}, "finish_reason": None}]},
                      {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
                      {"choices": [], "usage": usage}]
            data = "".join(f"data: {json.dumps({'id': 'c', 'object': 'chat.completion.chunk', 'model': 'policy', **c})}"
                           "\n\n" for c in chunks) + "data: [DONE]\n\n"
            self.reply(200, data.encode(), "text/event-stream")

    return Policy


@pytest.mark.requires("harness:openclaw", "web")
def test_openclaw_clicks_the_button_with_its_own_browser_tool(tmp_path: Path) -> None:
    harness = compose(["+harness=openclaw"]).experiment.harness
    assert is_installed(harness)
    log: list[str] = []
    server, url = serve_http(_policy(log))
    try:
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "forge_cli", "eval", "--json", "+harness=openclaw", "+env=miniwob",
             "harness.browser=native", "env.options.envs=[click-button]", "env.options.test_seeds=1",
             "eval.trials=1", "eval.retries=0", f"proxy.upstream={url}", "proxy.port=0", "tools.port=0",
             "model.max_model_len=32768", f"run.output_dir={tmp_path}", "run.name=openclaw-native"],
            capture_output=True, text=True, cwd=REPO, timeout=900, env={**os.environ, "COLUMNS": "200"}, check=False)
        print(f"\n[e2e] openclaw native browser: {time.monotonic() - started:.0f}s", flush=True)
    finally:
        server.shutdown()
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = Path(json.loads(done.stdout)["meta"]["run_dir"])
    (result,) = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    logs = Path(result["logs"])
    output = (logs / "harness.stderr").read_text(errors="replace")[-2000:]
    assert result["reward"] == 1.0 and result["passed"], f"{result}\n{log}\n{output}"
    with sqlite3.connect(run_dir / "traces.sqlite") as db:
        (request,) = db.execute("SELECT request FROM calls WHERE rollout_id = ? ORDER BY seq LIMIT 1",
                                (result["rollout_id"],)).fetchone()
    offered = {(t.get("function") or t).get("name") for t in json.loads(request).get("tools") or []}
    assert not any(str(name).endswith("browser_click") for name in offered), offered  # no forge MCP tools besides
