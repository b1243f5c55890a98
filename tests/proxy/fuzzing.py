"""Fuzzing the capture proxy's HTTP surface: cases, a raw HTTP/1.1 client with deadlines, and the verdicts.

Shared by ``tests/proxy/test_fuzz.py`` (a bounded run) and ``benchmarks/fuzz_proxy.py`` (a longer one). Every case
is one request over its own connection against the real proxy process (``start_proxy``) in front of the fake
upstream (``fake_upstream.py``, whose ``bad-<kind>`` models misbehave). A case passes when it ends, before its
deadline, in a 2xx answer of its wire format's shape, or a 4xx/5xx whose body is its wire format's error shape, or
a 200 stream whose last event is the format's terminal event (an error event counts); never a hang, a reset
without an answer, a traceback, HTML or a bare body. ``check_records`` then compares the calls the upstream saw
(each case sends ``x-fuzz-case``) with the records in the trace store.
"""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FORMATS = ("chat", "responses", "anthropic", "gemini")
MISBEHAVIOURS = ("json-invalid", "json-truncated", "json-shape", "json-types", "json-types-deep", "json-array",
                 "json-empty", "json-slow", "ctype-html", "ctype-none", "status-html", "status-detail", "status-204",
                 "status-302", "sse-garbage", "sse-types", "sse-nodone", "sse-truncated", "sse-error", "sse-html",
                 "sse-slow")


# -- requests of each wire format -------------------------------------------------------------------------
def path(fmt: str, model: str = "m", stream: bool = False) -> str:
    """The client path of a model call (after ``/r/<id>``)."""
    if fmt == "gemini":
        return f"/v1beta/models/{model}:" + ("streamGenerateContent?alt=sse" if stream else "generateContent")
    return {"chat": "/v1/chat/completions", "responses": "/v1/responses", "anthropic": "/v1/messages"}[fmt]


def body(fmt: str, model: str = "m", stream: bool = False) -> dict[str, Any]:
    """A valid request with a bit of everything (content parts, tools, a tool call and its result)."""
    if fmt == "chat":
        return {"model": model, "stream": stream, "max_tokens": 16, "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "a.txt"}],
            "tools": [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]}
    if fmt == "responses":
        return {"model": model, "stream": stream, "instructions": "be brief", "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "a.txt"}],
            "tools": [{"type": "function", "name": "ls", "parameters": {"type": "object"}}]}
    if fmt == "anthropic":
        return {"model": model, "stream": stream, "max_tokens": 16, "system": [{"type": "text", "text": "be brief"}],
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.txt"}]}],
                "tools": [{"name": "ls", "description": "list", "input_schema": {"type": "object"}}]}
    return {"systemInstruction": {"parts": [{"text": "be brief"}]}, "contents": [
        {"role": "user", "parts": [{"text": "hi"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "ls", "response": {"out": "a.txt"}}}]}],
        "generationConfig": {"maxOutputTokens": 16},
        "tools": [{"functionDeclarations": [{"name": "ls", "parameters": {"type": "OBJECT"}}]}]}


# -- verdicts ---------------------------------------------------------------------------------------------
def error_shape_ok(fmt: str, status: int, obj: Any) -> bool:
    """Is ``obj`` an error body in ``fmt``'s shape (OpenAI for chat/responses, Anthropic, Google)?"""
    if not isinstance(obj, dict) or not isinstance(obj.get("error"), dict):
        return False
    err = obj["error"]
    if not isinstance(err.get("message"), str) or not err["message"] or "Traceback" in err["message"]:
        return False
    if fmt == "anthropic":
        return obj.get("type") == "error" and isinstance(err.get("type"), str)
    if fmt == "gemini":
        return err.get("code") == status and isinstance(err.get("status"), str)
    return isinstance(err.get("type"), str)


def success_shape_ok(fmt: str, obj: Any) -> bool:
    if not isinstance(obj, dict):
        return False
    if fmt == "chat":
        return obj.get("object") == "chat.completion" and isinstance(obj.get("choices"), list)
    if fmt == "responses":
        return obj.get("object") == "response" and isinstance(obj.get("output"), list)
    if fmt == "anthropic":
        return obj.get("type") == "message" and isinstance(obj.get("content"), list)
    return isinstance(obj.get("candidates"), list)


def _events(data: bytes) -> list[tuple[str | None, Any]]:
    out: list[tuple[str | None, Any]] = []
    for raw in data.replace(b"\r\n", b"\n").split(b"\n\n"):
        name, lines = None, []
        for line in raw.split(b"\n"):
            if line.startswith(b"event:"):
                name = line[6:].strip().decode("utf-8", "replace")
            elif line.startswith(b"data:"):
                lines.append(line[5:].strip())
        if not lines:
            continue
        text = b"\n".join(lines)
        try:
            out.append((name, "[DONE]" if text == b"[DONE]" else json.loads(text)))
        except ValueError:
            out.append((name, text))
    return out


def stream_end(fmt: str, data: bytes) -> str | None:
    """``"done"`` / ``"error"`` when the stream's last event is the format's terminal (error) event, else None."""
    events = _events(data)
    if not events:
        return None
    name, last = events[-1]
    if fmt == "chat":
        if last == "[DONE]":
            return "error" if any(isinstance(o, dict) and "error" in o for _, o in events) else "done"
        return "error" if isinstance(last, dict) and isinstance(last.get("error"), dict) else None
    if not isinstance(last, dict):
        return None
    if fmt == "responses":
        kind = last.get("type")
        return {"response.completed": "done", "response.incomplete": "done", "response.failed": "error",
                "error": "error"}.get(str(kind))
    if fmt == "anthropic":
        if last.get("type") == "message_stop":
            return "done"
        return "error" if name == "error" and last.get("type") == "error" else None
    if isinstance(last.get("error"), dict):
        return "error"
    cands = last.get("candidates")
    return "done" if isinstance(cands, list) and cands and isinstance(cands[0], dict) and \
        cands[0].get("finishReason") else None


# -- cases ------------------------------------------------------------------------------------------------
@dataclass
class Case:
    """One request: what is sent and how (``send``: ``whole``, ``trickle_headers``, ``trickle_body``, ``stall``)."""

    id: str
    fmt: str
    kind: str
    body: bytes
    path: str = ""
    method: str = "POST"
    headers: dict[str, str] = field(default_factory=dict)
    send: str = "whole"
    key: str = "good"  # "good": the rollout's key, "none", "wrong"
    expect: str = ""  # the wire format of the answer when not ``fmt`` (a route of another format)


@dataclass
class Result:
    case: Case
    status: int | None = None
    outcome: str = ""  # ok | http_<status> | stream_error | stream_done | violation:<what>
    detail: str = ""
    seconds: float = 0.0

    @property
    def violation(self) -> bool:
        return self.outcome.startswith("violation")


def _rand_value(rng: random.Random, depth: int = 0) -> Any:
    """A JSON value of a random type (the wrong type for most fields)."""
    choice = rng.randrange(9 if depth < 3 else 6)
    return [None, True, rng.randint(-2**40, 2**40), rng.random() * 1e6, "x" * rng.randrange(3),
            "\u202e\U0001f600\x00", [], {}, {"type": "text"}][choice] if choice < 9 else None


def paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += paths(v, (*prefix, i))
    return out


def replace_at(obj: Any, where: tuple[Any, ...], value: Any, delete: bool = False) -> Any:
    """A deep copy of ``obj`` with the field at ``where`` replaced by ``value`` (or removed)."""
    obj = json.loads(json.dumps(obj))
    parent = obj
    for step in where[:-1]:
        parent = parent[step]
    if delete:
        del parent[where[-1]]
    else:
        parent[where[-1]] = value
    return obj


def mutate(obj: Any, rng: random.Random) -> Any:
    """A deep copy of ``obj`` with one field (any depth) replaced by a value of another type, or removed."""
    return replace_at(obj, rng.choice(paths(obj)), _rand_value(rng), delete=rng.random() < 0.15)


def _enc(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode()


def cases_for(fmt: str, rng: random.Random, n_random: int, max_body: int) -> list[Case]:
    """Hand-picked cases of every family plus ``n_random`` random ones for one wire format."""
    good = body(fmt)
    text = _enc(good)
    cases: list[tuple[str, bytes, dict[str, Any]]] = [
        ("malformed_json", b"{not json", {}), ("malformed_json", b"", {}), ("malformed_json", b"{" * 10, {}),
        ("malformed_json", text[: len(text) // 2], {}), ("malformed_json", text[:-1], {}),
        ("malformed_json", text + b"}", {}), ("malformed_json", b'{"model": "m", "max_tokens": 1, oops}', {}),
        ("unknown_shape", b"[]", {}), ("unknown_shape", b"null", {}), ("unknown_shape", b'"text"', {}),
        ("unknown_shape", b"12", {}), ("unknown_shape", _enc({"prompt": "hi", "model": "m"}), {}),
        ("unknown_shape", _enc(body({"chat": "gemini"}.get(fmt, "chat"))), {}),
        ("unknown_shape", _enc({"messages": {"role": "user"}, "input": 5, "contents": "x"}), {}),
        ("unknown_shape", b"{}", {"path": "/v1/completions"}), ("unknown_shape", b"{}", {"path": "/v1/embeddings"}),
        ("unknown_shape", text, {"method": "PUT"}), ("unknown_shape", b"", {"method": "GET"}),
        ("unknown_shape", text, {"path": path(fmt) + "/../../forge/v1/rollouts"}),
        ("headers", text, {"headers": {"content-type": "text/plain"}}),
        ("headers", b"\x1f\x8b\x08\x00garbage", {"headers": {"content-encoding": "gzip"}}),
        ("headers", text, {"headers": {"content-encoding": "br"}}),
        ("headers", b"not zstd", {"headers": {"content-encoding": "zstd"}}),
        ("headers", text, {"key": "none"}), ("headers", text, {"key": "wrong"}),
        ("headers", text, {"headers": {f"x-junk-{i}": "v" * 1000 for i in range(40)}}),
        ("invalid_utf8", text.replace(b'"hi"', b'"h\xff\xfei"'), {}),
        ("invalid_utf8", b"\xef\xbb\xbf" + text, {}), ("invalid_utf8", text.decode().encode("utf-16"), {}),
        ("invalid_utf8", text.replace(b'"hi"', b'"\\ud800"'), {}),
        ("oversized", _enc({**good, "pad": "a" * (max_body + 1024)}), {}),
        ("oversized", b"[" * 200_000 + b"]" * 200_000, {}),
        ("oversized", b'{"a":' * 50_000 + b"1" + b"}" * 50_000, {}),
        ("oversized", text.replace(b'"hi"', b'"' + b"x" * (max_body // 2) + b'"'), {}),
        ("oversized", _enc({**good, "max_tokens": 10**30, "max_output_tokens": 10**30}), {}),
        ("oversized", text[:-1] + b', "n": ' + b"9" * 5000 + b"}", {}),
        ("oversized", text[:-1] + b', "temperature": NaN, "top_p": Infinity}', {}),
        ("oversized", _enc({**good, **{f"k{i}": i for i in range(20000)}}), {}),
    ]
    for kind in MISBEHAVIOURS:  # the upstream misbehaves; asked both ways
        for stream in (False, True):
            model = "bad-" + kind
            req = body(fmt, model, stream)
            cases.append(("upstream", _enc(req), {"path": path(fmt, model, stream)}))
    for _ in range(n_random):
        mutated = mutate(good, rng)
        cases.append(("wrong_types", _enc(mutated), {}))
    out = []
    for i, (kind, data, extra) in enumerate(cases):
        headers = {"content-type": "application/json", **extra.get("headers", {})}
        route = extra.get("path", path(fmt))
        out.append(Case(id=f"{fmt}-{i}-{kind}", fmt=fmt, kind=kind, body=data, path=route,
                        method=extra.get("method", "POST"), headers=headers, key=extra.get("key", "good"),
                        expect="chat" if route in ("/v1/completions", "/v1/embeddings") else ""))
    return out


def slowloris_cases(fmt: str) -> list[Case]:
    text = _enc(body(fmt))
    return [Case(id=f"{fmt}-slow-{send}", fmt=fmt, kind="slowloris", body=text, path=path(fmt),
                 headers={"content-type": "application/json"}, send=send)
            for send in ("trickle_headers", "trickle_body", "stall", "idle_connect")]


# -- the raw client ---------------------------------------------------------------------------------------
def _parse(raw: bytes) -> tuple[int | None, dict[str, str], bytes]:
    head, sep, rest = raw.partition(b"\r\n\r\n")
    if not sep:
        return None, {}, b""
    lines = head.decode("latin-1").split("\r\n")
    try:
        status = int(lines[0].split(" ", 2)[1])
    except (IndexError, ValueError):
        return None, {}, b""
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    if "chunked" in headers.get("transfer-encoding", ""):
        out = bytearray()
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            try:
                size = int(size_line.split(b";")[0], 16)
            except ValueError:
                break
            if size == 0:
                break
            out += rest[:size]
            rest = rest[size + 2:]
        return status, headers, bytes(out)
    if "content-length" in headers:
        return status, headers, rest[: int(headers["content-length"])]
    return status, headers, rest


async def _trickle(writer: asyncio.StreamWriter, data: bytes, every: float) -> None:
    for i in range(len(data)):
        writer.write(data[i:i + 1])
        await writer.drain()
        await asyncio.sleep(every)


async def send(case: Case, host: str, port: int, prefix: str, key: str, deadline: float) -> Result:
    """Send one case over a new connection; read until the proxy closes it or the deadline passes."""
    started = time.monotonic()
    result = Result(case)
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError as exc:
        result.outcome, result.detail = "violation:connect", repr(exc)
        return result
    headers = {"host": f"{host}:{port}", **case.headers, "x-fuzz-case": case.id, "connection": "close",
               "content-length": str(len(case.body))}
    if case.key != "none":
        headers["authorization"] = "Bearer " + (key if case.key == "good" else "fk-wrong")
    head = (f"{case.method} {prefix}{case.path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            + "\r\n").encode("latin-1")
    sender: asyncio.Task[None] | None = None
    if case.send == "trickle_headers":
        sender = asyncio.create_task(_trickle(writer, head, 0.2))
    elif case.send == "trickle_body":
        writer.write(head)
        sender = asyncio.create_task(_trickle(writer, case.body, 0.2))
    elif case.send == "stall":
        writer.write(head + case.body[:10])
    elif case.send == "whole":
        writer.write(head + case.body)
    raw = b""
    try:
        raw = await asyncio.wait_for(reader.read(-1), deadline)
    except TimeoutError:
        result.outcome = "violation:hang"
    except OSError as exc:
        result.detail = repr(exc)
    finally:
        if sender is not None:
            sender.cancel()
        writer.close()
    result.seconds = time.monotonic() - started
    if result.outcome:
        return result
    verdict(result, raw)
    return result


def verdict(result: Result, raw: bytes) -> None:
    """Classify what came back (see the module's docstring)."""
    fmt = result.case.expect or result.case.fmt
    status, headers, data = _parse(raw)
    result.status = status
    if status is None:
        result.outcome = "violation:no_answer"
        result.detail = (result.detail + " " + raw[:200].decode("latin-1")).strip()
        return
    snippet = data[:300].decode("utf-8", "replace")
    if status == 200 and "text/event-stream" in headers.get("content-type", ""):
        end = stream_end(fmt, data)
        result.outcome = f"stream_{end}" if end else "violation:stream_unterminated"
        result.detail = data[-300:].decode("utf-8", "replace")
        return
    try:
        obj = json.loads(data)
    except ValueError:
        obj = None
    if 200 <= status < 300:
        result.outcome = "ok" if success_shape_ok(fmt, obj) else "violation:bad_success_shape"
    elif 400 <= status < 600:
        result.outcome = f"http_{status}" if error_shape_ok(fmt, status, obj) else "violation:bad_error_shape"
    else:
        result.outcome = f"violation:status_{status}"
    result.detail = snippet


# -- a run ------------------------------------------------------------------------------------------------
@dataclass
class Report:
    results: list[Result]
    healthy: list[Result]
    seen: dict[str, int]
    records: dict[str, list[tuple[str, int | None, str | None]]]  # rollout -> (status, http_status, error)
    rollouts: dict[str, str]  # case id -> rollout id
    problems: list[str] = field(default_factory=list)
    lost: int = 0
    reached: int = 0

    def by_kind(self) -> Counter[str]:
        return Counter(f"{r.case.fmt} {r.outcome}" for r in self.results)


async def _register(client: Any, n: int) -> list[dict[str, Any]]:
    out = []
    for _ in range(n):
        resp = await client.post("/forge/v1/rollouts", json={"task": "fuzz"})
        out.append(resp.json())
    return out


async def _healthy(host: str, port: int, rollout: dict[str, Any], stop: asyncio.Event,
                   out: list[Result]) -> None:
    i = 0
    while not stop.is_set():
        fmt = FORMATS[i % 4]
        stream = bool(i // 4 % 2)
        case = Case(id=f"healthy-{i}", fmt=fmt, kind="healthy", body=_enc(body(fmt, "m", stream)),
                    path=path(fmt, "m", stream), headers={"content-type": "application/json"})
        out.append(await send(case, host, port, f"/r/{rollout['rollout_id']}", rollout["key"], 20.0))
        i += 1
        await asyncio.sleep(0.05)


async def run(proxy_url: str, admin_token: str, cases: list[Case], concurrency: int = 8,
              deadline: float = 15.0) -> tuple[list[Result], list[Result], dict[str, str], dict[str, Any]]:
    """Every case over its own rollout and connection, ``concurrency`` at a time, while a healthy rollout calls
    all four formats in a loop; returns (results, healthy results, case id -> rollout id, healthy rollout)."""
    import httpx

    host, port = proxy_url.split("//", 1)[1].rsplit(":", 1)
    async with httpx.AsyncClient(base_url=proxy_url, timeout=60,
                                 headers={"authorization": f"Bearer {admin_token}"}) as admin:
        registered = await _register(admin, len(cases) + 1)
        healthy_rollout, per_case = registered[0], registered[1:]
        stop = asyncio.Event()
        healthy: list[Result] = []
        background = asyncio.create_task(_healthy(host, int(port), healthy_rollout, stop, healthy))
        sem = asyncio.Semaphore(concurrency)

        async def one(case: Case, rollout: dict[str, Any]) -> Result:
            async with sem:
                return await send(case, host, int(port), f"/r/{rollout['rollout_id']}", rollout["key"], deadline)

        results = await asyncio.gather(*(one(c, r) for c, r in zip(cases, per_case, strict=True)))
        await asyncio.sleep(0.5)  # a few healthy calls after the storm too
        stop.set()
        await background
        await admin.post(f"/forge/v1/rollouts/{healthy_rollout['rollout_id']}/finish", json={})
    ids = {c.id: r["rollout_id"] for c, r in zip(cases, per_case, strict=True)}
    return list(results), healthy, ids, healthy_rollout


def check(results: list[Result], healthy: list[Result], rollouts: dict[str, str],
          healthy_rollout: dict[str, Any] | None, upstream_url: str, store: Path) -> Report:
    """Verdicts plus the record audit: every call the upstream saw has its record, with the error status the
    client got; the healthy rollout's calls all succeeded and were recorded ok."""
    import httpx

    seen: dict[str, int] = httpx.get(upstream_url + "/fuzz/seen", timeout=10).json()
    conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    records: dict[str, list[tuple[str, int | None, str | None]]] = {}
    for rid, status, http_status, error in conn.execute(
            "SELECT rollout_id, status, http_status, error FROM calls ORDER BY id"):
        records.setdefault(rid, []).append((status, http_status, error))
    conn.close()
    report = Report(results, healthy, seen, records, rollouts)
    for r in results:
        if r.violation:
            report.problems.append(f"{r.case.id}: {r.outcome} after {r.seconds:.1f}s "
                                   f"(status {r.status}) {r.detail[:200]!r}")
        n_seen = seen.get(r.case.id, 0)
        rows = records.get(rollouts[r.case.id], [])
        report.reached += n_seen
        report.lost += max(0, n_seen - len(rows))
        if len(rows) != n_seen:
            report.problems.append(f"{r.case.id}: upstream saw {n_seen} call(s), store has {len(rows)} record(s)")
        failed = r.outcome == "stream_error" or (r.status or 0) >= 400 or r.violation
        for status, http_status, error in rows:
            if failed and status == "ok":
                report.problems.append(f"{r.case.id}: the client got {r.outcome} but the record says ok")
            if r.status is not None and r.status >= 400 and http_status != r.status:
                report.problems.append(f"{r.case.id}: the client got {r.status}, the record says {http_status} "
                                       f"({status}: {error})")
    bad_healthy = [h for h in healthy if h.outcome not in ("ok", "stream_done")]
    for h in bad_healthy:
        report.problems.append(f"healthy call {h.case.id} ({h.case.fmt}): {h.outcome} {h.detail[:200]!r}")
    if healthy_rollout is None:
        return report
    ok_rows = [row for row in records.get(healthy_rollout["rollout_id"], []) if row[0] == "ok"]
    if len(ok_rows) != len(healthy):
        report.problems.append(f"healthy rollout: {len(healthy)} calls answered, {len(ok_rows)} recorded ok")
    report.lost += max(0, len(healthy) - len(ok_rows))
    return report
