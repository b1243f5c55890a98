"""A small, fast stand-in for a vLLM server: answers like vLLM 0.32's OpenAI server does with token capture on.

Used by the proxy's unit/fault tests (where the real vLLM fixture is not needed) and by the benchmark
(the "fast local upstream"). Stdlib only, one asyncio protocol, HTTP/1.1 keep-alive.

Answers have vLLM's shape (``vllm/entrypoints/openai/chat_completion/protocol.py``, rendered compact as its
``JSONResponse`` does): every field vLLM sends, ``null`` ones included; ``prompt_token_ids`` and per-choice
``token_ids`` when the request says ``return_token_ids``; ``choices[0].logprobs.content[*]`` as
``{"token", "logprob", "bytes", "top_logprobs": []}`` when it says ``logprobs`` (``top_logprobs`` 0, vLLM's
default). The prompt is as long as a tokenizer would make it of English text: ``TEMPLATE_IDS`` for the chat
template plus one id per ``BYTES_PER_ID`` bytes of the messages' text (and of the tools), so a 50 KB prompt gets
~12.5k ids, ``PROMPT_IDS`` for an empty one. The completion is ``TEXT`` (4 tokens), or ``min_tokens`` tokens
(vLLM's sampling parameter: at least that many) up to the output limit, ``finish_reason`` ``length`` when it
reaches the limit. Answer bytes are cached per shape (prompt length, completion length, flags), so the fake
costs a JSON parse of the request and a write per call, whatever the prompt's size. A prompt longer than the
served context (``MAX_MODEL_LEN``, 8192 unless ``fake_upstream.py PORT MAX_MODEL_LEN``) gets vLLM's 400.

Behaviour by the request's ``model``: ``fail-500`` answers 500, ``hang`` never answers, ``slow`` streams
one event every 0.2 s (20 events), ``bad-<kind>`` misbehaves as ``MISBEHAVIOURS`` says (invalid SSE, truncated
bodies, wrong content types: the fuzz tests); anything else answers normally. A request that does not parse
or has the wrong types answers 400 (as vLLM validates). Requests carrying ``x-fuzz-case`` are counted by that
id; ``GET /fuzz/seen`` lists the ids seen. Run: ``python fake_upstream.py PORT``.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import sys
from typing import Any

TOKENS = [9906, 11, 1917, 0]  # "Hello", ",", " world", "!"
TEXT = ["Hello", ",", " world", "!"]
LOGPROBS = [-0.25, -0.5, -0.75, -1.0]
TEMPLATE_IDS = 32  # the chat template's own tokens (role markers, headers): the prompt ids of an empty prompt
BYTES_PER_ID = 4  # a tokenizer on English text: about one id per 4 bytes
VOCAB = 49152  # SmolLM2's
MAX_MODEL_LEN = 8192  # the served context (SmolLM2's); a longer prompt is vLLM's 400. ``fake_upstream.py PORT LEN``


def _prompt_id(i: int) -> int:
    return i + 1 if i < TEMPLATE_IDS else 1 + (i * 7919) % VOCAB  # 1-5 digit ids, like a real vocabulary's


PROMPT_IDS = [_prompt_id(i) for i in range(TEMPLATE_IDS)]


def _text_bytes(value: Any) -> int:
    """Bytes of text in a message's content (a string, or parts with ``text``); anything else counts 0."""
    if isinstance(value, str):
        return len(value)  # characters: bytes for the ASCII prompts the benchmark sends, cheap for 50 KB
    if isinstance(value, list):
        return sum(len(p["text"]) for p in value if isinstance(p, dict) and isinstance(p.get("text"), str))
    return 0


def prompt_length(req: dict[str, Any]) -> int:
    """How many prompt ids vLLM would return for ``req``: the template's plus one per 4 bytes of its text."""
    size = 0
    for m in req.get("messages") or ():
        if isinstance(m, dict):
            size += _text_bytes(m.get("content"))
            for call in m.get("tool_calls") or ():
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                    size += len(function["arguments"])
    if req.get("tools"):
        size += len(json.dumps(req["tools"]))
    return TEMPLATE_IDS + size // BYTES_PER_ID


def prompt_ids(req: dict[str, Any]) -> list[int]:
    """The prompt ids vLLM would return for ``req`` (only their number follows the prompt)."""
    return list(_prompt_ids(prompt_length(req)))


@functools.lru_cache(maxsize=64)
def _prompt_ids(n: int) -> tuple[int, ...]:
    return tuple(_prompt_id(i) for i in range(n))


def _limit(req: dict[str, Any]) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        if isinstance(req.get(key), int) and not isinstance(req[key], bool):
            return int(req[key])
    return None


def completion_length(req: dict[str, Any]) -> tuple[int, bool]:
    """(completion tokens, whether that is the output limit): ``TEXT``, or ``min_tokens`` up to the limit."""
    wanted = req.get("min_tokens")
    if not isinstance(wanted, int) or isinstance(wanted, bool) or wanted <= len(TOKENS):
        return len(TOKENS), False
    return wanted, wanted == _limit(req)  # min_tokens above the limit is a 400 (_validate)


def _entry(i: int) -> dict[str, Any]:
    token = TEXT[i % 4]
    return {"token": token, "logprob": LOGPROBS[i % 4], "bytes": list(token.encode()), "top_logprobs": []}


def _logprobs(n: int) -> dict[str, Any]:
    return {"content": [_entry(i) for i in range(n)]}


def _usage(prompt: int, completion: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion,
            "prompt_tokens_details": None, "completion_tokens_details": None}


def chat_json(req: dict[str, Any], n_prompt: int | None = None) -> dict[str, Any]:
    """The non-streamed answer to ``req`` as vLLM's ``ChatCompletionResponse`` (``n_prompt``: its prompt length)."""
    tools = bool(req.get("tools"))
    n, at_limit = completion_length(req)
    n_prompt = prompt_length(req) if n_prompt is None else n_prompt
    text = None if tools else "".join(TEXT[i % 4] for i in range(n))
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None, "annotations": None,
                               "audio": None, "function_call": None}
    if tools:
        name = req["tools"][0]["function"]["name"]
        message["tool_calls"] = [{"id": "call_1", "type": "function",
                                  "function": {"name": name, "arguments": '{"city": "Paris"}'}}]
    message["reasoning"] = None
    ids = bool(req.get("return_token_ids"))
    choice: dict[str, Any] = {"index": 0, "message": message, "logprobs": _logprobs(n) if req.get("logprobs") else None,
                              "finish_reason": "length" if at_limit else "tool_calls" if tools else "stop",
                              "stop_reason": None, "token_ids": [TOKENS[i % 4] for i in range(n)] if ids else None,
                              "routed_experts": None}
    return {"id": "chatcmpl-fake", "object": "chat.completion", "created": 1, "model": req.get("model"),
            "choices": [choice], "service_tier": None, "system_fingerprint": None, "usage": _usage(n_prompt, n),
            "prompt_logprobs": None, "prompt_token_ids": list(_prompt_ids(n_prompt)) if ids else None,
            "prompt_text": None, "kv_transfer_params": None, "ec_transfer_params": None, "metrics": None}


def dumps(obj: Any) -> bytes:
    """JSON as vLLM's server renders it (starlette's ``JSONResponse``: compact, UTF-8)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


_IDS = itertools.count(1)


def chat_body(req: dict[str, Any]) -> bytes:
    """``chat_json(req)`` rendered, from a cache keyed by the answer's shape, with a fresh ``id`` per answer."""
    model = req.get("model")
    if model is not None and not isinstance(model, str):
        head, tail = _split(chat_json(req))
    else:
        tools = req.get("tools")
        head, tail = _chat_body(model, prompt_length(req), *completion_length(req), bool(req.get("return_token_ids")),
                                bool(req.get("logprobs")), tools[0]["function"]["name"] if tools else None)
    return head + b"%032x" % next(_IDS) + tail


def _split(obj: dict[str, Any]) -> tuple[bytes, bytes]:
    head, tail = dumps(obj).split(b'"chatcmpl-fake"', 1)  # the first key: the id
    return head + b'"chatcmpl-', b'"' + tail


@functools.lru_cache(maxsize=256)
def _chat_body(model: str | None, n_prompt: int, n: int, at_limit: bool, ids: bool, logprobs: bool,
               tool: str | None) -> tuple[bytes, bytes]:
    req: dict[str, Any] = {"model": model, "return_token_ids": ids, "logprobs": logprobs}
    if n > len(TOKENS):
        req.update(min_tokens=n, max_tokens=n if at_limit else None)
    if tool is not None:
        req["tools"] = [{"type": "function", "function": {"name": tool}}]
    return _split(chat_json(req, n_prompt))


def chat_events(req: dict[str, Any]) -> list[bytes]:
    """The streamed answer as vLLM's ``ChatCompletionStreamResponse`` chunks (``exclude_unset``), then ``[DONE]``."""
    ids = bool(req.get("return_token_ids"))
    head = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1, "model": req.get("model")}
    first: dict[str, Any] = {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                  "logprobs": None, "finish_reason": None}],
                             "prompt_token_ids": prompt_ids(req) if ids else None, "prompt_text": None}
    events = [first]
    count, at_limit = (20, False) if req.get("model") == "slow" else completion_length(req)
    for i in range(count):
        last = i == count - 1
        choice: dict[str, Any] = {"index": 0, "delta": {"content": TEXT[i % 4]},
                                  "logprobs": {"content": [_entry(i)]} if req.get("logprobs") else None,
                                  "finish_reason": ("length" if at_limit else "stop") if last else None}
        if last:
            choice["stop_reason"] = None
        choice["token_ids"] = [TOKENS[i % 4]] if ids else None
        events.append({**head, "choices": [choice]})
    if (req.get("stream_options") or {}).get("include_usage"):
        events.append({**head, "choices": [], "usage": _usage(prompt_length(req), count)})
    return [b"data: " + dumps(e) + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]


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
    limit, least = _limit(req), req.get("min_tokens")
    if isinstance(least, int) and limit is not None and least > limit:
        raise ValueError(f"min_tokens must be less than or equal to max_tokens={limit}, got {least}.")
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
        self.send_bytes(status, dumps(obj))

    def send_bytes(self, status: int, data: bytes) -> None:
        self.transport.write(_head(status, "application/json", len(data)) + data)

    def send_error(self, status: int, message: str, kind: str) -> None:
        """vLLM's ``ErrorResponse``."""
        self.send_json(status, {"error": {"message": message, "type": kind, "param": None, "code": status}})

    def answer(self, method: str, path: str, body: bytes) -> None:
        if path.startswith("/v1/models"):
            self.send_json(200, {"object": "list", "data": [{"id": "fake", "object": "model",
                                                             "max_model_len": MAX_MODEL_LEN}]})
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
            self.send_error(400, "JSON decode error", "BadRequestError")
            return
        model = req.get("model")
        if isinstance(model, str) and model.startswith("bad-") and model[4:] in MISBEHAVIOURS:
            asyncio.get_running_loop().create_task(self._misbehave(*MISBEHAVIOURS[model[4:]]))
            return
        try:
            self._answer(path, req, model)
        except (TypeError, KeyError, IndexError, AttributeError, ValueError) as exc:  # vLLM validates: 400
            self.send_error(400, f"invalid request: {exc!r}", "BadRequestError")

    def _answer(self, path: str, req: dict[str, Any], model: Any) -> None:
        _validate(req)
        if model == "hang":
            return
        if model == "fail-500":
            self.send_error(500, "engine crashed", "InternalServerError")
            return
        if path != "/v1/chat/completions":
            self.send_json(404, {"detail": "Not Found"})  # FastAPI's, for a route vLLM does not have
            return
        if prompt_length(req) > MAX_MODEL_LEN:
            self.send_error(400, f"This model's maximum context length is {MAX_MODEL_LEN} tokens. However, your "
                            f"prompt contains {prompt_length(req)} input tokens, which exceeds this limit even without "
                            f"any output tokens. Please reduce the length of the input prompt.", "BadRequestError")
            return
        if not req.get("stream"):
            self.send_bytes(200, chat_body(req))
            return
        events = chat_events(req)
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
    if len(sys.argv) > 2:
        MAX_MODEL_LEN = int(sys.argv[2])
    asyncio.run(serve(int(sys.argv[1])))
