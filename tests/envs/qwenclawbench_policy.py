"""A scripted policy: an OpenAI-compatible server that replays each QwenClawBench task's reference behaviour.

It answers Chat Completions like vLLM with tool calls (as an SSE stream when the request asks for one): the task is
recognised by a phrase of its prompt (the first user message), the turn by the number of assistant messages already
in the conversation. ``lazy`` answers every task by finishing at once (doing nothing): react's ``finish`` tool, or a
plain answer for a harness without one (``finish=None``, OpenClaw). A request for the model ``judge`` (or carrying
a grading rubric) gets a judge verdict: ``{"scores": ..., "total": JUDGE_TOTAL, "notes": ...}``. Real QwenClawBench
tasks are scripted in ``tests/envs/test_qwenclawbench_real.py``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Turn = dict[str, Any]  # {"tool": name, "args": {...}, "text": optional assistant text}
JUDGE_TOTAL = 1.0


def call(tool: str, text: str = "", **args: Any) -> Turn:
    return {"tool": tool, "args": args, "text": text}


def say(text: str) -> Turn:
    """A final answer with no tool call: how a harness without a ``finish`` tool (OpenClaw) ends its turn."""
    return {"tool": None, "args": {}, "text": text}


SAMPLE_SCRIPTS: dict[str, list[Turn]] = {
    "data/sales.csv": [call("bash", command="cat data/sales.csv"), call("write_file", path="total.txt", content="60\n"),
                       call("finish", "The total is 60.", summary="total 60 written to total.txt")],
    "server port from 8080": [call("bash", command="sed -i 's/port: 8080/port: 9090/' config.yaml"),
                              call("write_file", path="CHANGES.md", content="- server port 8080 -> 9090\n"),
                              call("finish", summary="port is 9090")],
    "notes/todo.txt": [call("read_file", path="notes/todo.txt"),
                       call("bash", command="wc -l < notes/todo.txt | tr -d ' ' > count.txt"),
                       call("finish", summary="2 lines")],
    "Say hello": [call("finish", "hello", summary="said hello")],
}
# the same behaviour through OpenClaw's own tools (exec, read, write), ending with a plain answer; the todo listing
# is over 1 KiB so that OpenClaw stores its tool result zstd-compressed in its session database
OPENCLAW_SCRIPTS: dict[str, list[Turn]] = {
    "data/sales.csv": [call("exec", command="cat data/sales.csv"), call("write", path="total.txt", content="60\n"),
                       say("The total is 60.")],
    "server port from 8080": [call("exec", command="sed -i 's/port: 8080/port: 9090/' config.yaml"),
                              call("write", path="CHANGES.md", content="- server port 8080 -> 9090\n"),
                              say("The port is 9090 now.")],
    "notes/todo.txt": [call("read", path="notes/todo.txt"), call("exec", command="cat notes/todo.txt; seq 10000 10400"),
                       call("exec", command="wc -l < notes/todo.txt | tr -d ' ' > count.txt"), say("2 lines.")],
}


def _user_text(messages: list[dict[str, Any]]) -> str:
    for m in messages:
        if m.get("role") == "user":
            c = m.get("content")
            return c if isinstance(c, str) else json.dumps(c)
    return ""


class Policy:
    """``finish``: the harness's tool that ends a run (react's ``finish``); None: end with a plain answer."""

    def __init__(self, scripts: dict[str, list[Turn]], lazy: bool = False, finish: str | None = "finish") -> None:
        self.scripts, self.lazy, self.finish = scripts, lazy, finish
        self.judge_calls = 0
        self.requests: list[dict[str, Any]] = []

    def answer(self, req: dict[str, Any]) -> dict[str, Any]:
        messages = req.get("messages") or []
        self.requests.append(req)
        if req.get("model") == "judge" or "Grading Rubric" in _user_text(messages):
            self.judge_calls += 1
            verdict = {"scores": {"quality": JUDGE_TOTAL}, "total": JUDGE_TOTAL, "notes": "scripted judge"}
            return self._reply(req, {"role": "assistant", "content": json.dumps(verdict)}, "stop")
        prompt = _user_text(messages)
        script = next((s for key, s in self.scripts.items() if key in prompt), None)
        turn_no = sum(1 for m in messages if m.get("role") == "assistant")
        if self.lazy or script is None or turn_no >= len(script):
            turn = call(self.finish, "Done.", summary="done") if self.finish else say("Done.")
        else:
            turn = script[turn_no]
        if turn["tool"] is None:
            return self._reply(req, {"role": "assistant", "content": turn["text"]}, "stop")
        message: dict[str, Any] = {"role": "assistant", "content": turn["text"] or None, "tool_calls": [{
            "id": f"call_{turn_no}", "type": "function",
            "function": {"name": turn["tool"], "arguments": json.dumps(turn["args"])}}]}
        return self._reply(req, message, "tool_calls")

    @staticmethod
    def _reply(req: dict[str, Any], message: dict[str, Any], finish: str) -> dict[str, Any]:
        return {"id": "chatcmpl-scripted", "object": "chat.completion", "created": 1, "model": req.get("model"),
                "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


def _sse(answer: dict[str, Any]) -> bytes:
    """A Chat Completions answer as the SSE stream vLLM sends for it (real harnesses such as OpenClaw stream)."""
    (choice,) = answer["choices"]
    message = choice["message"]
    head = {k: answer[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    delta: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
    if message.get("tool_calls"):
        delta["tool_calls"] = [dict(tc, index=i) for i, tc in enumerate(message["tool_calls"])]
    chunks = [head | {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
              head | {"choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]},
              head | {"choices": [], "usage": answer["usage"]}]
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


@contextmanager
def serve(policy: Policy) -> Iterator[str]:
    """The policy at ``http://127.0.0.1:PORT`` (any POST path answers; streamed when the request asks) for the
    duration of the block."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return None

        def do_GET(self) -> None:
            body = json.dumps({"object": "list", "data": [{"id": "policy", "object": "model"}]}).encode()
            self._send(200, body)

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                req = json.loads(raw)
                answer = policy.answer(req)
            except Exception as exc:
                self._send(400, json.dumps({"error": {"message": str(exc)}}).encode())
                return
            if req.get("stream"):
                self._send(200, _sse(answer), "text/event-stream")
            else:
                self._send(200, json.dumps(answer).encode())

        def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
