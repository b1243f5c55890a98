"""A stand-in for a teacher API: an OpenAI-compatible Chat Completions server that knows the builtin suite's
**train** tasks and their reference solutions, and nothing else.

    .venv/bin/python benchmarks/teacher_standin.py [--port 8500] [-- env.options.seed=0 ...]

(the server lives here, in the package, because ``forge harness fingerprint`` / ``check`` run their canary
against it; ``benchmarks/teacher_standin.py`` is its command-line entry and re-exports it.)

No teacher API (a frontier model, a large model on a GPU) is reachable from this machine, so tests and benchmarks
that need teacher trajectories point the harness at this server instead (``model=openai-compatible
model.base_url=http://127.0.0.1:PORT/v1``): it is what a user's teacher endpoint would be, through the same capture
proxy, wire-format translations, sandboxes and verifiers. It is **never** in an evaluation path:

- it recognises a train task by its instruction (whitespace normalised, found in the request's user messages) and
  answers only those; a request whose instruction is a ``val`` or ``test`` task's is refused with 403, any other
  with 404 (both as OpenAI-style errors);
- it picks the shell-like tool among the tools the request offers, by name (``bash``, ``exec_command``,
  ``run_shell_command``, ``shell``, ...) or else by a string (or argv array) parameter named ``command``/``cmd``/
  ``script``, and answers with one tool call running the task's reference solution; once the conversation holds a
  tool result it gives a short final answer (or, where the harness asks to be told with a command such as
  ``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``, calls the tool with that command);
- a request with no tools whose system prompt shows fenced ```` ```bash ```` blocks (forge-react's ``--tools text``
  protocol) is answered with the solution in one fenced block, then ``ACTION: finish``;
- answers stream when asked (``stream: true``, with ``stream_options.include_usage``); it returns no token ids, as
  a real API does not. Any bearer key is accepted and none is logged, unless it is made to behave like a paid API
  (``--key-env VAR``): then it requires that key (401), refuses vLLM's own request fields such as
  ``return_token_ids`` (400), and ``--busy N`` answers the first N requests 429 (what ``forge distill``'s retries
  are for).

The other wire formats (Responses, Anthropic Messages, Gemini) reach it through the proxy's translations to Chat
Completions, as they reach vLLM.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from forge_cli.serve.relay import JSONHandler, LocalServer

# tool names that run a shell command, best first
SHELL_NAMES = ("bash", "exec_command", "run_shell_command", "shell", "exec", "execute_command", "run_command",
               "terminal", "Bash")
COMMAND_PARAMS = ("command", "cmd", "script")
# a system prompt asking for fenced bash blocks instead of tool calls (forge-react --tools text)
TEXT_PROTOCOL = "```bash"
SUBMIT = re.compile(r"echo\s+([A-Z][A-Z_]*SUBMIT[A-Z_]*)")


def normalise(text: str) -> str:
    return " ".join(text.split())


@dataclass(frozen=True)
class Known:
    """What the stand-in knows of one task."""

    task_id: str
    split: str
    instruction: str
    solution: str | None  # None: a task it must refuse (val / test)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def shell_tool(tools: list[dict[str, Any]]) -> tuple[str, str, bool] | None:
    """(tool name, command parameter, whether it takes an argv array) of the shell-like tool offered, or None."""
    functions = [t.get("function", t) for t in tools if isinstance(t, dict)]
    by_name = {str(f.get("name")): f for f in functions}
    ordered = [by_name[n] for n in SHELL_NAMES if n in by_name] + [f for f in functions if f.get("name")
                                                                   not in SHELL_NAMES]
    for function in ordered:
        properties = (function.get("parameters") or {}).get("properties") or {}
        for param in COMMAND_PARAMS:
            schema = properties.get(param)
            if isinstance(schema, dict) and schema.get("type") in ("string", "array", None):
                return str(function["name"]), param, schema.get("type") == "array"
    return None


class Teacher:
    """The answers, as a pure function of a request body (the HTTP server below only carries them)."""

    def __init__(self, known: list[Known], key: str | None = None, busy: int = 0) -> None:
        # longest instruction first: an instruction that contains another is matched as itself
        self.known = sorted(known, key=lambda k: -len(k.instruction))
        self.served: list[str] = []  # task ids answered, in order (what the benchmark checks against val / test)
        # like a paid API: a bearer key it requires (None: any), fields it does not know refused (400), and the
        # first ``busy`` requests answered 429 (rate limited)
        self.key, self.busy = key, busy
        self.keys_seen: set[str] = set()
        self.lock = threading.Lock()

    def admit(self, authorization: str | None, body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        """An API's refusals before any answer: a wrong key (401), a rate limit (429), an unknown field (400)."""
        presented = (authorization or "").removeprefix("Bearer ").strip()
        with self.lock:
            self.keys_seen.add(presented)
            if self.key is not None and presented != self.key:
                return 401, _error("invalid API key", "invalid_api_key")
            if self.busy > 0:
                self.busy -= 1
                return 429, _error("rate limited: try again later", "rate_limit_exceeded")
        unknown = sorted(set(body) & {"return_token_ids", "prompt_logprobs", "skip_special_tokens"})
        if self.key is not None and unknown:  # a paid API's strictness (vLLM's own fields)
            return 400, _error(f"Unrecognized request argument supplied: {', '.join(unknown)}",
                               "invalid_request_error")
        return None

    def match(self, messages: list[dict[str, Any]]) -> Known | None:
        said = normalise(" ".join(_text(m.get("content")) for m in messages if m.get("role") in ("user", "system")))
        return next((k for k in self.known if k.instruction in said), None)

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        messages = body.get("messages") or []
        known = self.match(messages)
        if known is None:
            return 404, _error("not a builtin train task: the teacher stand-in answers nothing else", "not_found")
        if known.solution is None:
            return 403, _error(f"task {known.task_id} is a {known.split} task: the teacher stand-in never answers "
                               f"val or test tasks", "permission_denied")
        tool = shell_tool(body.get("tools") or [])
        if tool is None and not body.get("tools") and TEXT_PROTOCOL in " ".join(
                _text(m.get("content")) for m in messages if m.get("role") == "system"):
            return self._text_answer(body, known, messages)
        if tool is None:
            return 400, _error("no shell-like tool offered (bash, exec_command, run_shell_command, ...)",
                               "invalid_request_error")
        self.served.append(known.task_id)
        ran = any(m.get("role") == "tool" for m in messages)
        everything = " ".join(_text(m.get("content")) for m in messages)
        submit = SUBMIT.search(everything)
        if not ran:
            return 200, _completion(body, _call(tool, known.solution))
        if submit and not any(submit.group(0) in json.dumps(m.get("tool_calls") or []) for m in messages):
            return 200, _completion(body, _call(tool, f"echo {submit.group(1)}"))
        return 200, _completion(body, {"role": "assistant", "content": "Done: the task is complete."})

    def _text_answer(self, body: dict[str, Any], known: Known, messages: list[dict[str, Any]]
                     ) -> tuple[int, dict[str, Any]]:
        """A harness with a text tool protocol (no ``tools``; its system prompt shows fenced bash blocks, as
        forge-react's ``--tools text``): the solution in one fenced block, then ``ACTION: finish``."""
        assert known.solution is not None
        self.served.append(known.task_id)
        if any(m.get("role") == "assistant" for m in messages):
            return 200, _completion(body, {"role": "assistant", "content": "ACTION: finish\nThe task is complete."})
        return 200, _completion(body, {"role": "assistant", "content": f"```bash\n{known.solution}\n```"})


def _error(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": kind}}


def _call(tool: tuple[str, str, bool], command: str) -> dict[str, Any]:
    name, param, argv = tool
    value: Any = ["bash", "-lc", command] if argv else command
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
         "function": {"name": name, "arguments": json.dumps({param: value})}}]}


def _completion(body: dict[str, Any], message: dict[str, Any]) -> dict[str, Any]:
    prompt = sum(len(_text(m.get("content"))) for m in body.get("messages") or []) // 4
    completion = len(json.dumps(message)) // 4
    return {"id": f"chatcmpl-{uuid.uuid4().hex[:16]}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model") or "teacher",
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}}


def stream_chunks(full: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    """The chunks of a streamed answer equal to ``full``."""
    base = {k: full[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = full["choices"][0]
    message = choice["message"]
    delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        delta["tool_calls"] = [dict(call, index=i) for i, call in enumerate(message["tool_calls"])]
    chunks = [base | {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
              base | {"choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]}]
    if include_usage:
        chunks.append(base | {"choices": [], "usage": full["usage"]})
    return chunks


class _Handler(JSONHandler):
    teacher: Teacher

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self.send_json(200, {"object": "list", "data": [{"id": "teacher", "object": "model"}]})
        else:
            self.send_json(404, _error(f"no route {self.path}", "not_found"))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError:
            self.send_json(400, _error("the body is not JSON", "invalid_request_error"))
            return
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self.send_json(404, _error(f"no route {self.path}: the stand-in serves /v1/chat/completions", "not_found"))
            return
        refused = self.teacher.admit(self.headers.get("Authorization"), body)
        status, payload = refused or self.teacher.answer(body)
        if status != 200 or not body.get("stream"):
            self.send_json(status, payload)
            return
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        chunks = stream_chunks(payload, include_usage)
        self.send_events([*(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks), b"data: [DONE]\n\n"])


class TeacherServer(LocalServer):
    """The stand-in on 127.0.0.1 in a thread: ``with TeacherServer(teacher) as server: server.base_url``."""

    def __init__(self, teacher: Teacher, port: int = 0) -> None:
        super().__init__(type("Handler", (_Handler,), {"teacher": teacher}), port)
        self.base_url = f"{self.url}/v1"


def builtin_teacher(overrides: tuple[str, ...] | list[str] = (), key: str | None = None, busy: int = 0) -> Teacher:
    """A teacher of the builtin suite's train split (its instances drawn by ``overrides``, e.g.
    ``env.options.seed=1000``), refusing the val and test tasks of the same draw."""
    from forge_cli.config.compose import compose
    from forge_cli.envs.source import load_tasks

    known: list[Known] = []
    for split in ("train", "val", "test"):
        env = compose([*overrides, f"env.split={split}"]).experiment.env
        for task in load_tasks(env).tasks:
            solution = task.metadata.get("solution") if split == "train" else None
            known.append(Known(task.id, split, normalise(task.instruction), solution))
    return Teacher(known, key, busy)


def main() -> None:
    argv = sys.argv[1:]
    extra: list[str] = []
    if "--" in argv:
        extra, argv = argv[argv.index("--") + 1:], argv[:argv.index("--")]
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=8500, help="port on 127.0.0.1 (0: any free one)")
    parser.add_argument("--key-env", default=None, help="behave like a paid API: require the key in this "
                                                        "environment variable, refuse vLLM's own fields")
    parser.add_argument("--busy", type=int, default=0, help="answer the first N requests 429 (rate limited)")
    args = parser.parse_args(argv)
    key = None
    if args.key_env:
        key = os.environ.get(args.key_env)
        if not key:
            parser.error(f"--key-env {args.key_env}: ${args.key_env} is not set")
    teacher = builtin_teacher(extra, key, args.busy)
    with TeacherServer(teacher, args.port) as server:
        print(f"teacher stand-in: {server.base_url} ({sum(k.solution is not None for k in teacher.known)} train "
              f"tasks; val and test refused)", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            server.thread.join()


if __name__ == "__main__":
    main()
