"""The capture proxy end to end: real mitmdump with forge's addon, the fake vLLM-like upstream, SDK clients."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from forge_cli.proxy.launcher import ProxyHandle, free_port, start_proxy
from tests.proxy import fake_upstream as fake
from tests.proxy.conftest import FakeUpstream, need_mitmdump

pytestmark = pytest.mark.mitm
MSG = [{"role": "user", "content": "hi"}]


def _oa(rollout: dict[str, Any], retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(base_url=rollout["base_url"] + "/v1", api_key=rollout["key"], max_retries=retries, timeout=20)


def _post(rollout: dict[str, Any], body: Any, **kw: Any) -> httpx.Response:
    headers = {"authorization": f"Bearer {rollout['key']}", "content-type": "application/json", **kw.pop("headers", {})}
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(rollout["base_url"] + "/v1/chat/completions", content=content, headers=headers, timeout=20)


def test_sdk_clients_all_formats(proxy: ProxyHandle, rollout: dict[str, Any]) -> None:
    client = _oa(rollout)
    assert client.chat.completions.create(model="m", messages=MSG).choices[0].message.content == "Hello, world!"
    text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="m", messages=MSG, stream=True) if c.choices)
    assert text == "Hello, world!"
    assert client.responses.create(model="m", input="hi").output_text == "Hello, world!"
    events = list(client.responses.create(model="m", input="hi", stream=True))
    assert events[-1].type == "response.completed" and events[-1].response.output_text == "Hello, world!"
    claude = anthropic.Anthropic(base_url=rollout["base_url"], api_key=rollout["key"], max_retries=0)
    message = claude.messages.create(model="m", max_tokens=20000, messages=MSG)
    assert message.content[0].text == "Hello, world!"  # type: ignore[union-attr]
    with claude.messages.stream(model="m", max_tokens=32, messages=MSG) as stream:
        assert stream.get_final_message().content[0].text == "Hello, world!"  # type: ignore[union-attr]
    calls = proxy.calls(rollout["rollout_id"])
    assert [(c["wire_format"], c["stream"], c["status"]) for c in calls] == [
        ("chat", False, "ok"), ("chat", True, "ok"), ("responses", False, "ok"), ("responses", True, "ok"),
        ("anthropic", False, "ok"), ("anthropic", True, "ok")]
    for c in calls:
        assert c["prompt_token_ids"] == fake.PROMPT_IDS and c["completion_token_ids"] == fake.TOKENS
        assert len(c["completion_logprobs"]) == len(c["completion_token_ids"])
        assert c["weight_version"] == "0" and c["request"]["model"] == "m"
        assert not any(k.lower() in ("authorization", "x-api-key") for k in c["headers"])
    assert calls[4]["upstream_request"]["max_tokens"] == 8192  # clamped to the upstream's context


def test_bad_input_gets_clear_4xx_and_proxy_keeps_serving(proxy: ProxyHandle, rollout: dict[str, Any]) -> None:
    before = proxy.metrics()
    cases = [
        (_post(rollout, b"{not json"), 400),
        (_post(rollout, b'{"logprobs": true, oops}'), 400),
        (_post(rollout, b'{"max_tokens": 1, oops}'), 400),  # not parsed by the proxy: the upstream says 400
        (_post(rollout, b"{}", headers={"content-type": "text/plain"}), 415),
        (_post(rollout, b'{"x": "' + b"a" * (2 << 20) + b'"}'), 413),
        (httpx.post(proxy.url + "/v1/chat/completions", json={}, timeout=10), 404),
        (httpx.post(rollout["base_url"] + "/v1/embeddings", json={},
                    headers={"authorization": f"Bearer {rollout['key']}"}, timeout=10), 404),
        (httpx.post(rollout["base_url"] + "/v1/chat/completions", json={}, timeout=10), 401),
        (_post({**rollout, "key": "wrong"}, {"model": "m"}), 401),
        (_post(rollout, {"model": "m"}, headers={f"x-junk-{i}": "v" * 1000 for i in range(40)}), 431),
    ]
    for resp, status in cases:
        assert resp.status_code == status, resp.text
        assert resp.json()["error"]["message"]
    assert _oa(rollout).chat.completions.create(model="m", messages=MSG).choices[0].message.content
    after = proxy.metrics()
    for kind in ("bad_request", "content_type", "body_too_large", "unknown_route", "unauthorized", "header_too_large"):
        assert f'forge_proxy_errors_total{{kind="{kind}"}}' in after, kind
    assert before != after
    calls = proxy.calls(rollout["rollout_id"])  # the unparsed invalid body reached the upstream, which said 400
    assert [(c["status"], c["http_status"]) for c in calls] == [("upstream_error", 400), ("ok", 200)]
    assert calls[0]["request"] == '{"max_tokens": 1, oops}'  # kept as text


def test_upstream_500_and_timeout(proxy: ProxyHandle, rollout: dict[str, Any]) -> None:
    client = _oa(rollout)
    with pytest.raises(openai.InternalServerError, match="engine crashed"):
        client.chat.completions.create(model="fail-500", messages=MSG)
    claude = anthropic.Anthropic(base_url=rollout["base_url"], api_key=rollout["key"], max_retries=0)
    with pytest.raises(anthropic.InternalServerError) as err:
        claude.messages.create(model="fail-500", max_tokens=8, messages=MSG)
    assert err.value.body["type"] == "error"  # type: ignore[index]
    started = time.monotonic()
    with pytest.raises(openai.APIStatusError) as timeout:
        client.chat.completions.create(model="hang", messages=MSG)
    assert timeout.value.status_code == 502 and time.monotonic() - started < 10
    assert "forge proxy" in str(timeout.value.body)
    calls = proxy.calls(rollout["rollout_id"])
    assert [c["status"] for c in calls] == ["upstream_error"] * 3
    assert "timed out" in calls[2]["error"] and calls[0]["http_status"] == 500


def test_upstream_down_then_failover(fake_upstream: FakeUpstream, tmp_path: Path) -> None:
    need_mitmdump()
    dead = f"http://127.0.0.1:{free_port()}"
    with start_proxy(f"{dead},{fake_upstream.url}", store=tmp_path / "t.sqlite", max_output_tokens=0) as proxy:
        outcomes = []
        for _ in range(4):
            r = proxy.register(task="down")
            first = _post(r, {"model": "m", "messages": MSG})
            outcomes.append(first.status_code)
            if first.status_code != 200:
                assert first.json()["error"]["message"].startswith("forge proxy")
                assert _post(r, {"model": "m", "messages": MSG}).status_code == 200  # failed over
                assert [c["status"] for c in proxy.calls(r["rollout_id"])] == ["upstream_error", "ok"]
        assert 502 in outcomes


def test_client_disconnect_mid_stream(proxy: ProxyHandle, rollout: dict[str, Any]) -> None:
    headers = {"authorization": f"Bearer {rollout['key']}"}
    with httpx.stream("POST", rollout["base_url"] + "/v1/chat/completions", headers=headers, timeout=20,
                      json={"model": "slow", "messages": MSG, "stream": True}) as resp:
        lines = resp.iter_lines()
        got = [next(lines) for _ in range(6)]
        assert any(line.startswith("data: {") for line in got)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        calls = proxy.calls(rollout["rollout_id"])
        if calls:
            break
        time.sleep(0.2)
    (call,) = calls
    assert call["status"] == "client_abort"
    assert 0 < len(call["completion_token_ids"]) < 20


def test_pause_resume_and_weight_version(proxy: ProxyHandle, rollout: dict[str, Any]) -> None:
    proxy.pause()
    result: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: result.update(r=_post(rollout, {"model": "m", "messages": MSG})))
    thread.start()
    time.sleep(1.0)
    assert "r" not in result  # waits while paused
    proxy.set_weight_version("step-7")
    proxy.resume()
    thread.join(10)
    assert result["r"].status_code == 200
    assert proxy.calls(rollout["rollout_id"])[0]["weight_version"] == "step-7"
    proxy.set_weight_version("0")
    finished = proxy.finish(rollout["rollout_id"])
    assert finished["status"] == "finished" and finished["calls"] == 1
    assert _post(rollout, {"model": "m", "messages": MSG}).status_code == 401  # finished rollouts are closed


def test_control_api_needs_admin_token(proxy: ProxyHandle) -> None:
    assert httpx.get(proxy.url + "/forge/v1/rollouts", timeout=5).status_code == 401
    wrong = {"authorization": "Bearer x"}
    assert httpx.get(proxy.url + "/forge/v1/rollouts", headers=wrong, timeout=5).status_code == 401
    assert httpx.get(proxy.url + "/forge/v1/health", timeout=5).json()["ok"] is True


def test_kill_9_under_load_loses_no_answered_call(fake_upstream: FakeUpstream, tmp_path: Path) -> None:
    need_mitmdump()
    store = tmp_path / "t.sqlite"
    proxy = start_proxy(fake_upstream.url, store=store, max_output_tokens=0)
    r = proxy.register(task="kill")
    answered: list[int] = []
    stop = threading.Event()

    def load(worker: int) -> None:
        with httpx.Client(timeout=5) as client:
            i = 0
            while not stop.is_set():
                try:
                    resp = client.post(r["base_url"] + "/v1/chat/completions", headers={
                        "authorization": f"Bearer {r['key']}"}, json={"model": "m", "messages": MSG,
                                                                       "stream": bool(i % 2)})
                    if resp.status_code == 200 and ("[DONE]" in resp.text or "choices" in resp.text):
                        answered.append(1)
                except httpx.HTTPError:
                    return
                i += 1

    threads = [threading.Thread(target=load, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(answered) < 40:  # under load, mid-stream (busy machines: slower)
        time.sleep(0.2)
    os.kill(proxy.process.pid, signal.SIGKILL)
    proxy.process.wait()
    stop.set()
    for t in threads:
        t.join(10)
    n_answered = len(answered)
    assert n_answered > 20
    restarted = start_proxy(fake_upstream.url, store=store, max_output_tokens=0)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            conn = sqlite3.connect(store)
            stored = conn.execute("SELECT COUNT(*) FROM calls WHERE rollout_id = ? AND status = 'ok'",
                                  (r["rollout_id"],)).fetchone()[0]
            if stored >= n_answered:
                break
            conn.close()
            time.sleep(0.5)
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        statuses = conn.execute("SELECT status, COUNT(*) FROM calls GROUP BY status").fetchall()
        assert stored >= n_answered, (stored, n_answered, statuses)
        assert restarted.health()["ok"]
    finally:
        restarted.stop()
