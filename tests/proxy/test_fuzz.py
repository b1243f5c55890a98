"""The proxy's HTTP surface under fuzzing (bounded; ``benchmarks/fuzz_proxy.py`` runs longer).

The real proxy process in front of the fake upstream (its ``bad-<kind>`` models answer invalid SSE, truncated
bodies, wrong content types and statuses). For all four wire formats: malformed and truncated JSON, wrong types
inside messages, tools and content parts (hand-picked, seeded-random and ``hypothesis``-generated), unknown
shapes and routes, invalid UTF-8 and encodings, oversized fields and nesting, slow-loris clients. Every case must
end before its deadline in a 2xx of its format's shape or a 4xx/5xx in its format's error shape (a 200 stream: in
its terminal or error event), a healthy rollout's calls must all succeed meanwhile, every call that reached the
upstream must have its record (with the error status the client got), and the proxy must log no traceback.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forge_cli.proxy.launcher import ProxyHandle, start_proxy
from tests.proxy import fuzzing
from tests.proxy.conftest import FakeUpstream, need_mitmdump

pytestmark = pytest.mark.mitm
MAX_BODY_MB = 1
CLIENT_TIMEOUT_S = 2
UPSTREAM_TIMEOUT_S = 2
DEADLINE_S = UPSTREAM_TIMEOUT_S + CLIENT_TIMEOUT_S + 10  # longer than any answer may take: past it is a hang

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6)


@pytest.fixture(scope="module")
def fuzz_upstream() -> Iterator[FakeUpstream]:
    up = FakeUpstream()  # its own: the calls it saw are this module's
    up.start()
    yield up
    up.stop()


@pytest.fixture(scope="module")
def fuzz_proxy(fuzz_upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyHandle]:
    need_mitmdump()
    store = tmp_path_factory.mktemp("fuzz") / "traces.sqlite"
    handle = start_proxy(fuzz_upstream.url, store=store, max_body_mb=MAX_BODY_MB, max_output_tokens=0,
                         upstream_timeout_s=UPSTREAM_TIMEOUT_S,
                         extra_args=["--set", f"forge_client_timeout={CLIENT_TIMEOUT_S}"])
    yield handle
    alive = handle.alive()
    handle.stop()
    log = handle.log_file.read_text(errors="replace")
    assert alive, "the proxy died under fuzzing:\n" + log[-3000:]
    assert "Traceback" not in log, log[-5000:]  # every bad input was handled, none crashed a hook


def _fail(report: fuzzing.Report) -> str:
    return f"{len(report.problems)} problem(s):\n" + "\n".join(report.problems[:30])


def test_storm_every_case_ends_in_its_format_and_nothing_is_lost(fuzz_proxy: ProxyHandle,
                                                                 fuzz_upstream: FakeUpstream) -> None:
    rng = random.Random(12)
    cases = [c for fmt in fuzzing.FORMATS for c in fuzzing.cases_for(fmt, rng, 15, MAX_BODY_MB << 20)]
    cases += [c for fmt in fuzzing.FORMATS for c in fuzzing.slowloris_cases(fmt)]
    results, healthy, ids, healthy_rollout = asyncio.run(
        fuzzing.run(fuzz_proxy.url, fuzz_proxy.admin_token, cases, concurrency=8, deadline=DEADLINE_S))
    report = fuzzing.check(results, healthy, ids, healthy_rollout, fuzz_upstream.url, fuzz_proxy.store)
    assert not report.problems, _fail(report)
    assert report.lost == 0
    assert report.reached > 100  # most cases did reach the upstream (and were recorded)
    assert len(healthy) >= 20  # the healthy rollout kept being served during the storm and after it
    by = {r.case.id: r for r in results}
    for fmt in fuzzing.FORMATS:  # slow clients: 408 in their format, at the client deadline, not the 600 s idle one
        for send in ("trickle_headers", "trickle_body", "stall", "idle_connect"):
            slow = by[f"{fmt}-slow-{send}"]
            assert slow.status == 408 and slow.seconds < CLIENT_TIMEOUT_S + 3, (slow.outcome, slow.seconds)
    upstream = [r for r in results if r.case.kind == "upstream"]
    assert {r.outcome for r in upstream} <= {"http_400", "http_422", "http_500", "http_502", "stream_error",
                                             "stream_done", "ok"}, {r.outcome for r in upstream}
    oversized = [r for r in results if r.case.kind == "oversized" and r.case.body.startswith(b'{"model"')
                 and len(r.case.body) > MAX_BODY_MB << 20]
    assert oversized and all(r.status == 413 for r in oversized)  # read as 413, not a connection reset
    metrics = fuzz_proxy.metrics()
    for kind in ("upstream_bad_answer", "upstream_bad_stream", "bad_request", "body_too_large"):
        assert f'forge_proxy_errors_total{{kind="{kind}"}}' in metrics, kind


@pytest.mark.parametrize("fmt", fuzzing.FORMATS)
def test_generated_values_anywhere_in_a_request(fuzz_proxy: ProxyHandle, fuzz_upstream: FakeUpstream,
                                                fmt: str) -> None:
    """hypothesis: any JSON value at any depth of a valid request (messages, tools, content parts, config)."""
    results: list[fuzzing.Result] = []
    ids: dict[str, str] = {}
    host, port = fuzz_proxy.url.split("//", 1)[1].rsplit(":", 1)

    @settings(max_examples=40, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data(), stream=st.booleans(), delete=st.booleans())
    def one(data: st.DataObject, stream: bool, delete: bool) -> None:
        good = fuzzing.body(fmt, "m", stream)
        where = data.draw(st.sampled_from(fuzzing.paths(good)))
        value = data.draw(JSON_VALUES)
        body = fuzzing.replace_at(good, where, value, delete=delete and where != ("stream",))
        rollout = fuzz_proxy.register(task="fuzz-hypothesis")
        case = fuzzing.Case(id=f"hyp-{fmt}-{len(results)}", fmt=fmt, kind="generated",
                            body=json.dumps(body).encode(), path=fuzzing.path(fmt, "m", stream),
                            headers={"content-type": "application/json"})
        ids[case.id] = rollout["rollout_id"]
        result = asyncio.run(fuzzing.send(case, host, int(port), f"/r/{rollout['rollout_id']}", rollout["key"],
                                          DEADLINE_S))
        results.append(result)
        assert not result.violation, (where, value, result.outcome, result.detail)

    one()
    fuzz_proxy.calls(ids[results[-1].case.id])  # waits until every record sent so far is committed
    report = fuzzing.check(results, [], ids, None, fuzz_upstream.url, fuzz_proxy.store)
    assert not report.problems, _fail(report)


def test_idle_keep_alive_connection_is_not_a_slow_client(fuzz_proxy: ProxyHandle) -> None:
    """The client deadline runs from a request's first byte: a pooled connection idle between calls stays open."""
    rollout = fuzz_proxy.register(task="fuzz-keepalive")
    body = json.dumps(fuzzing.body("chat")).encode()
    host, port = fuzz_proxy.url.split("//", 1)[1].rsplit(":", 1)
    request = (f"POST /r/{rollout['rollout_id']}/v1/chat/completions HTTP/1.1\r\nhost: {host}\r\n"
               f"authorization: Bearer {rollout['key']}\r\ncontent-type: application/json\r\n"
               f"content-length: {len(body)}\r\n\r\n").encode() + body
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        for i in range(2):
            if i:
                time.sleep(CLIENT_TIMEOUT_S + 1.5)  # idle past the client deadline
            sock.sendall(request)
            answer = _read_one(sock)
            assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
    assert [c["status"] for c in fuzz_proxy.calls(rollout["rollout_id"])] == ["ok", "ok"]


def test_sdks_read_the_broken_upstream_errors(fuzz_proxy: ProxyHandle) -> None:
    """What a harness sees: the official SDKs raise their API error (not a decode error) on a broken upstream."""
    import anthropic
    import openai

    rollout = fuzz_proxy.register(task="fuzz-sdk")
    oa = openai.OpenAI(base_url=rollout["base_url"] + "/v1", api_key=rollout["key"], max_retries=0, timeout=20)
    claude = anthropic.Anthropic(base_url=rollout["base_url"], api_key=rollout["key"], max_retries=0, timeout=20)
    msg = [{"role": "user", "content": "hi"}]
    for kind in ("json-invalid", "ctype-html", "status-html", "status-detail"):
        with pytest.raises(openai.APIStatusError):
            oa.chat.completions.create(model=f"bad-{kind}", messages=msg)  # type: ignore[arg-type]
        with pytest.raises(anthropic.APIStatusError):
            claude.messages.create(model=f"bad-{kind}", max_tokens=8, messages=msg)  # type: ignore[arg-type]
    for kind in ("sse-nodone", "sse-truncated", "sse-garbage", "sse-error"):
        with pytest.raises(openai.APIError):
            list(oa.chat.completions.create(model=f"bad-{kind}", messages=msg, stream=True))  # type: ignore[arg-type]
        with pytest.raises(anthropic.APIError), claude.messages.stream(
                model=f"bad-{kind}", max_tokens=8, messages=msg) as stream:  # type: ignore[arg-type]
            stream.get_final_message()
    assert httpx.get(fuzz_proxy.url + "/forge/v1/health", timeout=5).json()["ok"]


def _read_one(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, rest = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(
        b"content-length")))
    while len(rest) < length:
        rest += sock.recv(65536)
    return head + b"\r\n\r\n" + rest


def test_fuzz_module_is_a_library(tmp_path: Path) -> None:
    """The verdicts themselves: shapes of each format are told apart (no proxy needed)."""
    assert fuzzing.error_shape_ok("gemini", 400, {"error": {"code": 400, "message": "m", "status": "INVALID"}})
    assert not fuzzing.error_shape_ok("anthropic", 400, {"error": {"message": "m", "type": "x"}})
    assert fuzzing.stream_end("chat", b'data: {"choices": []}\n\ndata: [DONE]\n\n') == "done"
    assert fuzzing.stream_end("anthropic", b'event: error\ndata: {"type":"error","error":{}}\n\n') == "error"
    assert fuzzing.stream_end("responses", b'data: {"type": "response.created"}\n\n') is None
    result = fuzzing.Result(fuzzing.Case(id="x", fmt="chat", kind="k", body=b""))
    fuzzing.verdict(result, b"HTTP/1.1 502 Bad Gateway\r\ncontent-type: text/html\r\n\r\n<html>")
    assert result.outcome == "violation:bad_error_shape"
    assert not any(Path(tmp_path).iterdir())
    del result
    value: Any = fuzzing.replace_at({"a": [1, {"b": 2}]}, ("a", 1, "b"), None)
    assert value == {"a": [1, {"b": None}]}


def test_writer_binds_values_of_any_type(tmp_path: Path) -> None:
    """A client's ``"model": [1]`` or a lone surrogate once made every later commit fail and the writer exit."""
    from forge_cli.proxy import assemble
    from forge_cli.traces import frames, store

    conn = store.open_store(tmp_path / "t.sqlite")
    base = {"type": "call", "rollout_id": "r", "wire_format": "chat", "status": "ok", "http_status": 200}
    bodies = [frames.encode({**base, "n": i + 1, "seq": i, "model": model}, {"request": b"{}", "response": b"{}"})
              for i, model in enumerate(([1], {"a": None}, "\ud800", 10**30, "m"))]
    assert assemble.apply(conn, [frames.split(bytearray(b))[0] for b in bodies]) == 5
    assert [r.model for r in store.iter_calls(conn, "r")] == ["[1]", '{"a":null}', "?", str(10**30), "m"]
