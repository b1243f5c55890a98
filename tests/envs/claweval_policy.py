"""A scripted tool-calling policy for Claw-Eval tasks: a fake OpenAI-compatible server for forge-react.

Scripts are keyed by a piece of the task's prompt: each is a list of task-tool calls and a final answer. For a
request whose first user message contains a script's key, the reply is the next step: a ``bash`` call running
the task tool through the skill's ``call.py`` (how forge-react reaches task tools), then ``finish`` with the
answer. ``python claweval_policy.py PORT SCRIPTS.json`` serves it.
"""

from __future__ import annotations

import json
import shlex
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def _reply(model: str, call: dict[str, Any] | None, text: str = "") -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if call is not None:
        message["tool_calls"] = [{"id": f"call_{abs(hash(json.dumps(call))) % 10**8}", "type": "function",
                                  "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])}}]
    return {"id": "chatcmpl-scripted", "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if call else "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


def step(scripts: dict[str, dict[str, Any]], request: dict[str, Any]) -> dict[str, Any]:
    messages = request.get("messages") or []
    first = next((str(m.get("content")) for m in messages if m.get("role") == "user"), "")
    script = next((s for key, s in scripts.items() if key in first), None)
    model = str(request.get("model") or "scripted")
    if script is None:
        return _reply(model, {"name": "finish", "arguments": {"summary": "I did nothing."}})
    done = sum(1 for m in messages if m.get("role") == "assistant")
    calls = script.get("calls") or []
    if done < len(calls):
        tool, args = calls[done]
        command = f'python3 "$HOME/forge-tools/call.py" {shlex.quote(tool)} {shlex.quote(json.dumps(args))}'
        return _reply(model, {"name": "bash", "arguments": {"command": command}})
    return _reply(model, {"name": "finish", "arguments": {"summary": script.get("answer", "")}})


def serve(scripts: dict[str, dict[str, Any]], port: int = 0) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return None

        def do_GET(self) -> None:
            self._send({"object": "list", "data": [{"id": "scripted", "object": "model"}]})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            self._send(step(scripts, body))

        def _send(self, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


if __name__ == "__main__":
    with open(sys.argv[2]) as f:
        srv = serve(json.load(f), int(sys.argv[1]))
    print(f"scripted policy on {srv.server_address[1]}", flush=True)
    threading.Event().wait()
