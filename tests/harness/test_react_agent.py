"""forge-react (``forge_cli/remote/sandbox/react_agent.py``) run as a subprocess against a scripted loopback
Chat Completions server: structured tool calls, the text protocol, the append-only history, auth,
server failures, step and context limits, and tool timeouts."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

AGENT = Path(__file__).resolve().parents[2] / "forge_cli" / "remote" / "sandbox" / "react_agent.py"
PYTHON = shutil.which("python3") or sys.executable
# a scripted reply: a dict (JSON body, HTTP 200), ("status", code, text), ("close",) or ("sleep", seconds)
Reply = dict[str, Any] | tuple[Any, ...]


def tool_call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def completion(content: str | None = None, calls: list[dict[str, Any]] | None = None,
               usage: dict[str, int] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return {"id": "cmpl-1", "object": "chat.completion", "model": "test-model",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": usage or {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}}


class FakeChat:
    """A loopback Chat Completions server answering from a script; records every request."""

    def __init__(self) -> None:
        self.script: list[Reply] | Callable[[int], Reply] = []
        self.requests: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                fake.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                n = len(fake.requests) - 1
                reply = fake.script(n) if callable(fake.script) else (
                    fake.script[n] if n < len(fake.script) else ("status", 500, "script exhausted"))
                if isinstance(reply, tuple) and reply[0] == "close":
                    self.close_connection = True
                    return
                if isinstance(reply, tuple) and reply[0] == "sleep":
                    time.sleep(reply[1])
                    return
                code, text = (reply[1], reply[2]) if isinstance(reply, tuple) else (200, json.dumps(reply))
                data = text.encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.block_on_close = False
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/r/rollout-1/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def chat() -> Iterator[FakeChat]:
    fake = FakeChat()
    yield fake
    fake.close()


def run_agent(chat: FakeChat, workdir: Path, *args: str, env: dict[str, str] | None = None,
              timeout: float = 60) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """Run forge-react as a sandbox would (bare environment, the workspace as cwd); its JSON events."""
    full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(workdir), "LANG": "C.UTF-8",
                "FORGE_BASE_URL": chat.base_url, "FORGE_API_KEY": "sk-rollout-1", "FORGE_MODEL": "test-model",
                "FORGE_MAX_TOKENS": "256", **(env or {})}
    proc = subprocess.run([PYTHON, str(AGENT), *args], cwd=workdir, env=full_env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    return proc, events


def final(events: list[dict[str, Any]]) -> dict[str, Any]:
    assert events and events[-1]["type"] == "final", events
    return events[-1]


def test_structured_tool_calls_write_file_then_finish(chat: FakeChat, tmp_path: Path) -> None:
    chat.script = [
        completion(calls=[tool_call("write_file", {"path": "sub/hello.txt", "content": "hi there\n"}, "call_a")]),
        completion(calls=[tool_call("finish", {"summary": "wrote it"}, "call_b")]),
    ]
    proc, events = run_agent(chat, tmp_path, "--max-steps", "5", "write hello.txt")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "sub" / "hello.txt").read_text() == "hi there\n"
    assert final(events) == {"type": "final", "status": "finished", "steps": 2, "summary": "wrote it"}
    assert [e["name"] for e in events if e["type"] == "tool"] == ["write_file", "finish"]
    assert all(e["mode"] == "structured" for e in events if e["type"] == "step")
    second = chat.requests[1]["body"]
    assert second["messages"][-1]["role"] == "tool" and second["messages"][-1]["tool_call_id"] == "call_a"
    assert "wrote 9 bytes" in second["messages"][-1]["content"]
    assert {t["function"]["name"] for t in second["tools"]} == {"bash", "read_file", "write_file", "finish"}
    assert second["model"] == "test-model" and second["max_tokens"] == 256 and "temperature" not in second


def test_text_fenced_bash_block_is_run(chat: FakeChat, tmp_path: Path) -> None:
    chat.script = [completion("Let me look.\n```bash\necho fenced > out.txt && echo done\n```\n"),
                   completion("ACTION: finish\nall done")]
    proc, events = run_agent(chat, tmp_path, "make out.txt")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out.txt").read_text() == "fenced\n"
    bash = next(e for e in events if e["type"] == "tool")
    assert (bash["name"], bash["mode"], bash["exit_code"], bash["timed_out"]) == ("bash", "text", 0, False)
    observation = chat.requests[1]["body"]["messages"][-1]
    assert observation["role"] == "user" and "exit_code: 0" in observation["content"]
    assert "done" in observation["content"]
    assert final(events) == {"type": "final", "status": "finished", "steps": 2, "summary": "all done"}


@pytest.mark.parametrize("text", [
    'I will write it.\n<tool_call>{"name": "write_file", "arguments": {"path": "a.txt", "content": "x1"}}</tool_call>',
    "<tool_call>\n" + json.dumps({"name": "write_file", "arguments": json.dumps({"path": "a.txt", "content": "x1"})})
    + "\nThe file will be written.",  # arguments as a JSON string; no closing tag
    "Thought: write the file.\nACTION: write_file\na.txt\nx1",
    "ACTION: bash\nprintf x1 > a.txt\nOBSERVATION: (imagined by the model, not run)",
    "action: bash\n```sh\nprintf x1 > a.txt\n```",
    "ACTION: write_file\na.txt\n```\nx1\n```\n",
    "ACTION: bash: printf x1 > a.txt",
    # only the first action of a reply runs
    "```bash\nprintf x1 > a.txt\n```\nACTION: bash\nprintf x2 > a.txt\n<tool_call>{\"name\": \"bash\"}</tool_call>",
])
def test_other_text_protocol_forms(chat: FakeChat, tmp_path: Path, text: str) -> None:
    chat.script = [completion(text), completion('<tool_call>{"name": "finish", "arguments": {"summary": "ok"}}'
                                                "</tool_call>")]
    proc, events = run_agent(chat, tmp_path, "write a.txt")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "a.txt").read_text() == "x1"
    assert final(events)["status"] == "finished" and final(events)["summary"] == "ok"
    tools = [e for e in events if e["type"] == "tool"]
    assert len(tools) == 2 and tools[0]["mode"] == "text" and "result" in tools[0]
    assert "OBSERVATION" not in json.dumps(tools[0]["arguments"]) and "```" not in json.dumps(tools[0]["arguments"])
    assert tools[0]["result"].startswith("exit_code: 0" if tools[0]["name"] == "bash" else "wrote 2 bytes")


def test_history_is_append_only(chat: FakeChat, tmp_path: Path) -> None:
    replies = [
        completion("first I list", calls=[tool_call("bash", {"command": "ls"}, "c1"),
                                          tool_call("read_file", {"path": "missing.txt"}, "c2")]),
        completion("```bash\necho step2\n```"),
        completion("I am not sure what to do."),  # no action: a nudge is appended
        completion(None, calls=[tool_call("bash", {"command": "echo not json"}, "c3")]),
        completion(calls=[{"id": "c4", "type": "function", "function": {"name": "bash", "arguments": "{oops"}}]),
        completion(calls=[tool_call("finish", {"summary": "s"}, "c5")]),
    ]
    chat.script = replies
    proc, events = run_agent(chat, tmp_path, "--max-steps", "10", "explore")
    assert proc.returncode == 0, proc.stderr
    assert final(events)["status"] == "finished" and len(chat.requests) == 6
    first = chat.requests[0]["body"]["messages"]
    assert [m["role"] for m in first] == ["system", "user"] and first[1]["content"] == "explore"
    for before, after, reply in zip(chat.requests, chat.requests[1:], replies, strict=False):
        sent, prefix = reply["choices"][0]["message"], before["body"]["messages"]
        assert after["body"]["messages"][:len(prefix)] == prefix
        assert after["body"]["messages"][len(prefix)] == sent
        assert len(after["body"]["messages"]) > len(prefix) + 1  # results (or a nudge) follow the reply
    tool_msgs = [m for m in chat.requests[1]["body"]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == ["c1", "c2"] and tool_msgs[1]["content"].startswith("error:")
    assert "invalid arguments" in chat.requests[5]["body"]["messages"][-1]["content"]


def test_bearer_key_path_and_temperature(chat: FakeChat, tmp_path: Path) -> None:
    chat.script = [completion("ACTION: finish\nnothing to do")]
    proc, _ = run_agent(chat, tmp_path, "--temperature", "0.7", "noop")
    assert proc.returncode == 0, proc.stderr
    request = chat.requests[0]
    assert request["path"] == "/r/rollout-1/v1/chat/completions"
    assert request["headers"]["Authorization"] == "Bearer sk-rollout-1"
    assert request["body"]["temperature"] == 0.7 and request["body"].get("stream") in (None, False)


def test_server_500_ends_with_error_after_retries(chat: FakeChat, tmp_path: Path) -> None:
    chat.script = lambda n: ("status", 500, '{"error": "boom"}')
    start = time.monotonic()
    proc, events = run_agent(chat, tmp_path, "task", timeout=30)
    assert proc.returncode == 1
    assert final(events)["status"] == "error" and "HTTP 500" in final(events)["error"]
    assert len(chat.requests) == 3 and time.monotonic() - start < 20  # 1 try + 2 retries with backoff


@pytest.mark.parametrize("reply", [("close",), ("status", 200, "not json"), ("status", 200, '{"choices": []}'),
                                   ("status", 401, '{"error": "bad key"}')])
def test_broken_server_ends_with_error(chat: FakeChat, tmp_path: Path, reply: Reply) -> None:
    chat.script = lambda n: reply
    proc, events = run_agent(chat, tmp_path, "task", env={"FORGE_HTTP_RETRIES": "1"}, timeout=30)
    assert proc.returncode == 1
    assert final(events)["status"] == "error" and final(events)["steps"] == 0


def test_silent_server_times_out(chat: FakeChat, tmp_path: Path) -> None:
    chat.script = lambda n: ("sleep", 8)
    start = time.monotonic()
    proc, events = run_agent(chat, tmp_path, "task", env={"FORGE_HTTP_TIMEOUT": "1", "FORGE_HTTP_RETRIES": "0"})
    assert proc.returncode == 1 and final(events)["status"] == "error"
    assert time.monotonic() - start < 7


def test_no_server_at_all(tmp_path: Path) -> None:
    fake = FakeChat()
    fake.close()  # the port is free again: connection refused
    proc, events = run_agent(fake, tmp_path, "task", env={"FORGE_HTTP_RETRIES": "1"}, timeout=30)
    assert proc.returncode == 1 and final(events)["status"] == "error"


def test_max_steps(chat: FakeChat, tmp_path: Path) -> None:
    chat.script = lambda n: completion(f"```bash\necho {n} >> log.txt\n```")
    proc, events = run_agent(chat, tmp_path, "--max-steps", "3", "loop")
    assert proc.returncode == 0, proc.stderr
    assert final(events) == {"type": "final", "status": "max_steps", "steps": 3, "summary": ""}
    assert len(chat.requests) == 3 and (tmp_path / "log.txt").read_text() == "0\n1\n2\n"
    assert [e["step"] for e in events if e["type"] == "step"] == [1, 2, 3]


def test_bash_timeout_kills_the_command_and_its_children(chat: FakeChat, tmp_path: Path) -> None:
    chat.script = [completion(calls=[tool_call("bash", {"command": "echo started; sleep 60 & sleep 60"}, "c1")]),
                   completion(calls=[tool_call("finish", {"summary": "gave up"}, "c2")])]
    start = time.monotonic()
    proc, events = run_agent(chat, tmp_path, "wait", env={"FORGE_TOOL_TIMEOUT": "1"}, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - start < 15
    bash = next(e for e in events if e["type"] == "tool")
    assert bash["timed_out"] is True and bash["exit_code"] is None
    result = chat.requests[1]["body"]["messages"][-1]["content"]
    assert result.startswith("timeout:") and "started" in result
    assert final(events)["status"] == "finished"


def test_long_output_is_truncated(chat: FakeChat, tmp_path: Path) -> None:
    chat.script = [completion("```bash\nseq 1 100000\n```"), completion("ACTION: finish\nok")]
    proc, _ = run_agent(chat, tmp_path, "count")
    assert proc.returncode == 0, proc.stderr
    result = chat.requests[1]["body"]["messages"][-1]["content"]
    assert len(result) < 10_000 and "characters cut" in result and "100000" in result


def test_context_window_stops_before_an_overlong_request(chat: FakeChat, tmp_path: Path) -> None:
    # the server counts 1900 tokens after the first call; the next request would not fit in 2000
    chat.script = lambda n: completion("```bash\necho hi\n```", usage={"prompt_tokens": 1800, "completion_tokens": 100,
                                                                        "total_tokens": 1900})
    proc, events = run_agent(chat, tmp_path, "--max-steps", "5", "task", env={"FORGE_CONTEXT_WINDOW": "2000"})
    assert proc.returncode == 0, proc.stderr
    assert final(events)["status"] == "context_full" and final(events)["steps"] == 1
    assert len(chat.requests) == 1 and chat.requests[0]["body"]["max_tokens"] == 256


def test_context_window_shrinks_max_tokens(chat: FakeChat, tmp_path: Path) -> None:
    chat.script = [completion("ACTION: finish\nok")]
    proc, _ = run_agent(chat, tmp_path, "task", env={"FORGE_CONTEXT_WINDOW": "1500", "FORGE_MAX_TOKENS": "4096"})
    assert proc.returncode == 0, proc.stderr
    assert 64 <= chat.requests[0]["body"]["max_tokens"] < 1500


def test_server_context_length_error(chat: FakeChat, tmp_path: Path) -> None:
    message = ("This model's maximum context length is 8192 tokens. However, you requested 9000 tokens "
               "(8000 in the messages, 1000 in the completion).")
    chat.script = [completion("```bash\ntrue\n```"), ("status", 400, json.dumps({"error": {"message": message}}))]
    proc, events = run_agent(chat, tmp_path, "task")
    assert proc.returncode == 0, proc.stderr
    assert final(events)["status"] == "context_full" and final(events)["steps"] == 1
    assert "maximum context length" in final(events)["error"]


def test_server_without_tool_support_falls_back_to_text(chat: FakeChat, tmp_path: Path) -> None:
    refusal = '{"error": {"message": "\\"auto\\" tool choice requires --enable-auto-tool-choice"}}'
    chat.script = [("status", 400, refusal), completion("ACTION: finish\ntext only")]
    proc, events = run_agent(chat, tmp_path, "task")
    assert proc.returncode == 0, proc.stderr
    assert "tools" in chat.requests[0]["body"] and "tools" not in chat.requests[1]["body"]
    assert chat.requests[1]["body"]["messages"] == chat.requests[0]["body"]["messages"]
    assert final(events) == {"type": "final", "status": "finished", "steps": 1, "summary": "text only"}


def test_missing_environment_is_an_error(tmp_path: Path) -> None:
    proc = subprocess.run([PYTHON, str(AGENT), "task"], cwd=tmp_path, env={"PATH": os.environ.get("PATH", "")},
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert json.loads(proc.stdout.splitlines()[-1])["status"] == "error"


def test_version_runs_without_environment(tmp_path: Path) -> None:
    proc = subprocess.run([PYTHON, str(AGENT), "--version"], cwd=tmp_path, env={"PATH": os.environ.get("PATH", "")},
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and proc.stdout.startswith("forge-react ")


def test_imports_only_the_standard_library() -> None:
    tree = ast.parse(AGENT.read_text())
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "no relative imports"
            modules.add((node.module or "").split(".")[0])
    assert modules - {"__future__"} <= set(sys.stdlib_module_names), modules - set(sys.stdlib_module_names)
    assert "forge_cli" not in modules
