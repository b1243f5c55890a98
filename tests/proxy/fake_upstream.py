"""A small, fast stand-in for a vLLM server: answers like vLLM does with token capture switched on.

Used by the proxy's unit/fault tests (where the real vLLM fixture is not needed) and by the benchmark
(the "fast local upstream"). Stdlib only, one asyncio protocol, HTTP/1.1 keep-alive.

Behaviour by the request's ``model``: ``fail-500`` answers 500, ``hang`` never answers, ``slow`` streams
one event every 0.2 s (20 events), ``bad-<kind>`` misbehaves as ``MISBEHAVIOURS`` says (invalid SSE, truncated
bodies, wrong content types: the fuzz tests); anything else answers normally. A request that does not parse
or has the wrong types answers 400 (as vLLM validates). Requests carrying ``x-fuzz-case`` are counted by that
id; ``GET /fuzz/seen`` lists the ids seen. Run: ``python fake_upstream.py PORT``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

TOKENS = [9906, 11, 1917, 0]  # "Hello", ",", " world", "!"
TEXT = ["Hello", ",", " world", "!"]
PROMPT_IDS = list(range(1, 33))


def _logprobs(n: int) -> dict[str, Any]:
    return {"content": [{"token": TEXT[i % 4], "logprob": -0.25 * (i + 1), "bytes": None, "top_logprobs": []}
                        for i in range(n)]}


def chat_json(req: dict[str, Any]) -> dict[str, Any]:
    tools = bool(req.get("tools"))
    message: dict[str, Any] = {"role": "assistant", "content": None if tools else "".join(TEXT)}
    if tools:
        name = req["tools"][0]["function"]["name"]
        message["tool_calls"] = [{"id": "call_1", "type": "function",
                                  "function": {"name": name, "arguments": '{"city": "Paris"}'}}]
    choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": "tool_calls" if tools else "stop",
                              "logprobs": _logprobs(4) if req.get("logprobs") else None}
    out: dict[str, Any] = {"id": "chatcmpl-fake", "object": "chat.completion", "created": 1, "model": req.get("model"),
                           "choices": [choice],
                           "usage": {"prompt_tokens": len(PROMPT_IDS), "completion_tokens": 4, "total_tokens": 36}}
    if req.get("return_token_ids"):
        choice["token_ids"] = TOKENS
        out["prompt_token_ids"] = PROMPT_IDS
    return out


def chat_events(req: dict[str, Any]) -> list[bytes]:
    ids = bool(req.get("return_token_ids"))
    events = []
    first: dict[str, Any] = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1,
                             "model": req.get("model"),
                             "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                          "logprobs": None, "finish_reason": None}]}
    if ids:
        first["prompt_token_ids"] = PROMPT_IDS
    events.append(first)
    count = 20 if req.get("model") == "slow" else 4
    for i in range(count):
        choice: dict[str, Any] = {"index": 0, "delta": {"content": TEXT[i % 4]},
                                  "logprobs": {"content": _logprobs(4)["content"][i % 4:i % 4 + 1]}
                                  if req.get("logprobs") else None,
                                  "finish_reason": "stop" if i == count - 1 else None}
        if ids:
            choice["token_ids"] = [TOKENS[i % 4]]
        events.append({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1,
                       "model": req.get("model"), "choices": [choice]})
    if (req.get("stream_options") or {}).get("include_usage"):
        events.append({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1,
                       "model": req.get("model"), "choices": [],
                       "usage": {"prompt_tokens": len(PROMPT_IDS), "completion_tokens": count}})
    return [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]


def _head(status: int, ctype: str | None, length: int | None) -> bytes:
    reason = {200: "OK", 404: "Not Found", 500: "Internal Server Error", 400: "Bad Request"}.get(status, "OK")
    lines = [f"HTTP/1.1 {status} {reason}", *([f"content-type: {ctype}"] if ctype else [])]
    lines.append(f"content-length: {length}" if length is not None else "transfer-encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _chunked(events: list[bytes], end: bool = True) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + (b"0\r\n\r\n" if end else b"")


def _sse(objs: list[Any]) -> list[bytes]:
    return [b"data: " + (o if isinstance(o, bytes) else json.dumps(o).encode()) + b"\n\n" for o in objs]


_CHUNK = {"id": "chatcmpl-bad", "object": "chat.completion.chunk", "created": 1, "model": "bad",
          "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}, "finish_reason": None}]}
# kind -> (status, content type or None, body, how it ends): "close" closes the connection after the bytes (for a
# content-length body: before all of it), "trickle" sends the body one byte every 0.5 s, "ok" ends normally
MISBEHAVIOURS: dict[str, tuple[int, str | None, bytes | list[bytes], str]] = {
    "json-invalid": (200, "application/json", b'{"choices": [oops', "ok"),
    "json-truncated": (200, "application/json", json.dumps({"id": "x", "choices": [{"message": {}}]}).encode(),
                       "close"),
    "json-shape": (200, "application/json", b'{"choices": "nope", "usage": 5}', "ok"),
    "json-types": (200, "application/json", json.dumps(
        {"id": 5, "object": "chat.completion", "model": [1], "usage": "u", "prompt_token_ids": {},
         "choices": [{"message": ["x"], "finish_reason": 7, "logprobs": "x", "token_ids": "t"}]}).encode(), "ok"),
    "json-types-deep": (200, "application/json", json.dumps(
        {"id": "x", "object": "chat.completion", "choices": [{"message": {
            "content": 5, "tool_calls": ["x", {"function": "f"}], "reasoning": {}}, "logprobs": {"content": ["x", 1]}}],
         "usage": {"prompt_tokens": "many"}}).encode(), "ok"),
    "json-array": (200, "application/json", b"[1, 2]", "ok"),
    "json-empty": (200, "application/json", b"", "ok"),
    "json-slow": (200, "application/json", json.dumps({"id": "x", "choices": []}).encode(), "trickle"),
    "ctype-html": (200, "text/html", b"<html><body>Bad gateway</body></html>", "ok"),
    "ctype-none": (200, None, b"engine says hi", "ok"),
    "status-html": (500, "text/html", b"<html><body>500 Internal Server Error</body></html>", "ok"),
    "status-detail": (422, "application/json", b'{"detail": [{"loc": ["body"], "msg": "field required"}]}', "ok"),
    "status-204": (204, None, b"", "ok"),
    "status-302": (302, "text/plain", b"moved", "ok"),
    "sse-garbage": (200, "text/event-stream", [*_sse([b"{oops", b"\xff\xfe\xfd", b"[1, 2]", b"null"]),
                                               b": comment\n\n", b"nonsense line\n\n"], "ok"),
    "sse-types": (200, "text/event-stream", _sse([
        {"id": 5, "choices": "x"}, {"choices": [{"delta": ["x"], "finish_reason": 5}]},
        {"choices": [{"delta": {"content": 5, "tool_calls": "x", "reasoning": []}, "logprobs": "l",
                      "token_ids": 3}]},
        {"choices": [{"delta": {"tool_calls": ["x", {"index": "i", "function": "f"}]}}]},
        {"choices": ["c", None], "usage": "u", "prompt_token_ids": 7, "error": 5}, b"[DONE]"]), "ok"),
    "sse-nodone": (200, "text/event-stream", _sse([_CHUNK]), "ok"),
    "sse-truncated": (200, "text/event-stream", _sse([_CHUNK]), "close"),
    "sse-error": (200, "text/event-stream", _sse([_CHUNK, {"error": {"message": "engine died", "code": 500}},
                                                  b"[DONE]"]), "ok"),
    "sse-html": (200, "text/event-stream", [b"<html>oops</html>"], "ok"),
    "sse-slow": (200, "text/event-stream", _sse([_CHUNK]), "stall"),
}


def _validate(req: dict[str, Any]) -> None:
    """The types vLLM's request model checks (ValueError otherwise)."""
    messages = req.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages: a non-empty list required")
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ValueError("messages[]: objects with a role")
    for key in ("max_tokens", "max_completion_tokens"):
        if req.get(key) is not None and (not isinstance(req[key], int) or isinstance(req[key], bool) or req[key] < 1):
            raise ValueError(f"{key}: a positive integer")
    for t in req.get("tools") or ():
        if not isinstance(t, dict) or not isinstance(t.get("function"), dict) or \
                not isinstance(t["function"].get("name"), str):
            raise ValueError("tools[]: function objects with a name")


class Upstream(asyncio.Protocol):
    """One client connection: parse requests (Content-Length bodies), answer them in order."""

    seen: dict[str, int] = {}  # x-fuzz-case id -> requests seen

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if len(self.buf) < end + 4 + length:
                return
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "x-fuzz-case":
                    Upstream.seen[value.strip()] = Upstream.seen.get(value.strip(), 0) + 1
            body = self.buf[end + 4:end + 4 + length]
            self.buf = self.buf[end + 4 + length:]
            method, path = head.split(" ", 2)[:2]
            self.answer(method, path, body)

    def send_json(self, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.transport.write(_head(status, "application/json", len(data)) + data)

    def answer(self, method: str, path: str, body: bytes) -> None:
        if path.startswith("/v1/models"):
            self.send_json(200, {"object": "list", "data": [{"id": "fake", "object": "model", "max_model_len": 8192}]})
            return
        if path == "/health":
            self.transport.write(_head(200, "text/plain", 0))
            return
        if path == "/fuzz/seen":
            self.send_json(200, Upstream.seen)
            return
        try:
            req = json.loads(body)
            if not isinstance(req, dict):
                raise ValueError("not an object")
        except (ValueError, RecursionError):
            self.send_json(400, {"error": {"message": "JSON decode error", "type": "BadRequestError", "code": 400}})
            return
        model = req.get("model")
        if isinstance(model, str) and model.startswith("bad-") and model[4:] in MISBEHAVIOURS:
            asyncio.get_running_loop().create_task(self._misbehave(*MISBEHAVIOURS[model[4:]]))
            return
        try:
            self._answer(path, req, model)
        except (TypeError, KeyError, IndexError, AttributeError, ValueError) as exc:  # vLLM validates: 400
            self.send_json(400, {"error": {"message": f"invalid request: {exc!r}", "type": "BadRequestError",
                                           "code": 400}})

    def _answer(self, path: str, req: dict[str, Any], model: Any) -> None:
        _validate(req)
        if model == "hang":
            return
        if model == "fail-500":
            self.send_json(500, {"error": {"message": "engine crashed", "type": "InternalServerError", "code": 500}})
            return
        if path == "/v1/chat/completions":
            events, payload = (chat_events(req), None) if req.get("stream") else (None, chat_json(req))
        else:
            self.send_json(404, {"error": {"message": f"no route {path}", "code": 404}})
            return
        if payload is not None:
            self.send_json(200, payload)
            return
        assert events is not None
        if model == "slow":
            asyncio.get_running_loop().create_task(self._slow(events))
            return
        out = [_head(200, "text/event-stream", None)]
        out += [b"%x\r\n%s\r\n" % (len(e), e) for e in events]
        out.append(b"0\r\n\r\n")
        self.transport.write(b"".join(out))

    async def _misbehave(self, status: int, ctype: str | None, body: bytes | list[bytes], end: str) -> None:
        if isinstance(body, list):  # chunked (a stream)
            self.transport.write(_head(status, ctype, None) + _chunked(body, end == "ok"))
            if end == "stall":  # the stream stops without ending
                await asyncio.sleep(3600)
        elif end == "close":
            self.transport.write(_head(status, ctype, len(body)) + body[:len(body) // 2])
        elif end == "trickle":
            self.transport.write(_head(status, ctype, len(body)))
            for i in range(len(body)):
                if self.transport.is_closing():
                    return
                self.transport.write(body[i:i + 1])
                await asyncio.sleep(0.5)
            return
        else:
            self.transport.write(_head(status, ctype, len(body)) + body)
            return
        self.transport.close()

    async def _slow(self, events: list[bytes]) -> None:
        self.transport.write(_head(200, "text/event-stream", None))
        for event in events:
            if self.transport.is_closing():
                return
            self.transport.write(b"%x\r\n%s\r\n" % (len(event), event))
            await asyncio.sleep(0.2)
        self.transport.write(b"0\r\n\r\n")


async def serve(port: int, host: str = "127.0.0.1") -> None:
    server = await asyncio.get_running_loop().create_server(Upstream, host, port, backlog=1024)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1])))
