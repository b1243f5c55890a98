#!/usr/bin/env python3
"""forge-react: forge's own minimal ReAct harness (stdlib only; installed as ``bin/forge-react``).

Usage: ``forge-react [--max-steps N] [--temperature T] [--tools auto|text] "<instruction>"`` in the task workspace.
Environment: FORGE_BASE_URL (``.../v1``), FORGE_API_KEY, FORGE_MODEL, FORGE_MAX_TOKENS, and optionally
FORGE_CONTEXT_WINDOW (tokens; stop before a request would overflow it), FORGE_TOOL_TIMEOUT (s, default 120),
FORGE_HTTP_TIMEOUT (s, default 300), FORGE_HTTP_RETRIES (default 2).

Chat Completions with tools bash/read_file/write_file/finish, a text-protocol fallback (SYSTEM_PROMPT), and an
append-only history so consecutive calls extend each other's tokens. stdout: one JSON event per line, the last
``{"type": "final", "status": ..., "steps": n}``. Exit 0 when the run came to an end (finished, max_steps,
context_full), 1 on errors (HTTP, connection, invalid response).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

VERSION = "0.1.0"
OUTPUT_LIMIT = 8000  # characters of a tool result shown to the model
EVENT_LIMIT = 2000  # characters of text in a stdout event
CHARS_PER_TOKEN = 3.0  # conservative estimate for text the server has not counted yet

SYSTEM_PROMPT = """You are an autonomous agent working in a shell workspace (the current directory).
Solve the task step by step: think briefly, then take one action and wait for its result.

Tools: bash(command) runs a shell command here; read_file(path); write_file(path, content);
finish(summary) ends the run: call it once the task is done.

Call the tools as functions if you can. Otherwise write ONE action in your reply, in one of these forms:
```bash
ls -la
```
<tool_call>{"name": "write_file", "arguments": {"path": "notes.txt", "content": "hello"}}</tool_call>
ACTION: read_file
notes.txt
A line "ACTION: <tool>" is followed by the tool's input: the command for bash, the path for read_file,
the path and then the content on the next lines for write_file, the summary for finish. For example:
ACTION: finish
Created notes.txt.
Only the first action in a reply is run; its result comes back in the next message."""

# --tools text: a short few-shot prompt. Small models follow examples of the exact reply form far better than a
# description of it (SmolLM2-135M: 4 of 50 single-step solves with this prompt, 0 of 50 with SYSTEM_PROMPT)
TEXT_PROMPT = """You are a shell assistant working in the current directory. Reply with ONE bash code block that \
does the task. No explanations. When the task is done, reply with: ACTION: finish

Task: Create a file named notes.txt containing exactly the text `red fox`.
```bash
echo 'red fox' > notes.txt
```

Task: Count the lines of list.txt and write only that number into n.txt.
```bash
wc -l < list.txt > n.txt
```

Task: In app.ini, change the value of `mode` from `dev` to `prod`.
```bash
sed -i 's/^mode = dev$/mode = prod/' app.ini
```"""

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": name, "description": desc,
        "parameters": {"type": "object", "properties": {p: {"type": "string"} for p in params}, "required": params}}}
    for name, desc, params in [
        ("bash", "Run a shell command in the workspace; returns exit code, stdout and stderr.", ["command"]),
        ("read_file", "Read a text file.", ["path"]),
        ("write_file", "Write a text file (parents are created), replacing it.", ["path", "content"]),
        ("finish", "End the run once the task is done, with a short summary.", ["summary"]),
    ]
]


class AgentError(Exception):
    """The run cannot go on: the final status is ``error`` (or ``context_full`` when flagged)."""

    def __init__(self, message: str, context_full: bool = False) -> None:
        super().__init__(message)
        self.context_full = context_full


class ToolsRejected(AgentError):
    """The server refuses ``tools`` (e.g. vLLM without --enable-auto-tool-choice): go on with text only."""


def emit(event: dict[str, Any]) -> None:
    """One JSON event on stdout, flushed at once."""
    print(json.dumps(event, ensure_ascii=False), flush=True)


def clip(text: str, limit: int = OUTPUT_LIMIT) -> str:
    """Keep the head and tail of a long text."""
    half, cut = limit // 2, len(text) - limit
    return text if cut <= 0 else f"{text[:half]}\n... [{cut} characters cut] ...\n{text[-half:]}"


def env_num(name: str, default: float) -> float:
    value = os.environ.get(name, "").strip()
    try:
        return float(value) if value else default
    except ValueError:
        raise AgentError(f"{name}={value!r} is not a number") from None


def json_text(value: Any) -> str:
    """Tool-call arguments as the JSON string the API expects (some servers send an object)."""
    return value if isinstance(value, str) and value else json.dumps(value or {})


def parse_arguments(raw: str) -> dict[str, Any] | str:
    """Structured tool-call arguments as a dict, or an error message for the model."""
    try:
        args = json.loads(raw)
    except ValueError as exc:
        return f"not valid JSON ({exc})"
    return args if isinstance(args, dict) else "not a JSON object"


# ---------------------------------------------------------------- tools
def run_bash(command: str, timeout: float) -> tuple[str, int | None]:
    """Run ``command`` in its own process group; kill the group on timeout. Returns (result text, exit code)."""
    shell = shutil.which("bash") or "/bin/sh"
    proc = subprocess.Popen([shell, "-c", command], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        code: int | None = proc.returncode
        head = f"exit_code: {code}"
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        try:
            out, err = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:  # a grandchild escaped the group and holds the pipes
            out, err = b"", b""
        code, head = None, f"timeout: the command was killed after {timeout:g} s"
    half = OUTPUT_LIMIT // 2
    return (f"{head}\nstdout:\n{clip(out.decode(errors='replace'), half)}\n"
            f"stderr:\n{clip(err.decode(errors='replace'), half)}"), code


def run_tool(name: str, args: dict[str, Any], tool_timeout: float) -> tuple[str, int | None]:
    """Execute one tool call; errors are returned to the model as text. Returns (result, bash exit code)."""
    try:
        if name == "bash":
            return run_bash(str(args["command"]), tool_timeout)
        if name == "read_file":
            return clip(Path(str(args["path"])).read_text(errors="replace")), None
        if name == "write_file":
            path = Path(str(args["path"]))
            path.parent.mkdir(parents=True, exist_ok=True)
            content = str(args.get("content", ""))
            path.write_text(content)
            return f"wrote {len(content.encode())} bytes to {path}", None
        return f"error: unknown tool {name!r}; available: bash, read_file, write_file, finish", None
    except KeyError as exc:
        return f"error: {name} needs the argument {exc.args[0]!r}", None
    except OSError as exc:
        return f"error: {exc}", None


# ---------------------------------------------------------------- text protocol
TOOL_CALL_RE = re.compile(r"<tool_call>\s*")
FENCE_RE = re.compile(r"```(?:bash|sh|shell)[ \t]*\n(.*?)```", re.DOTALL)
ACTION_RE = re.compile(r"^[ \t]*ACTION:[ \t]*(\w+)[ \t]*:?(.*)$", re.IGNORECASE | re.MULTILINE | re.DOTALL)


def unfence(block: str) -> str:
    """``block`` without a fence (```lang ... ```) around all of it."""
    inner = re.fullmatch(r"\s*```[\w-]*[ \t]*\n(.*?)\n?```\s*", block, re.DOTALL)
    return inner.group(1) if inner else block


def parse_text_action(text: str) -> tuple[str, dict[str, Any]] | None:
    """The first action written in ``text`` (fenced bash, <tool_call> JSON, or ACTION: form), if any."""
    found: list[tuple[int, str, dict[str, Any]]] = []
    for match in TOOL_CALL_RE.finditer(text):
        try:
            obj, _ = json.JSONDecoder().raw_decode(text, match.end())
        except ValueError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("name"), str):
            args = obj.get("arguments", obj.get("parameters", {}))
            args = parse_arguments(args) if isinstance(args, str) else args
            found.append((match.start(), obj["name"], args if isinstance(args, dict) else {}))
            break
    fence = FENCE_RE.search(text)
    if fence:
        found.append((fence.start(), "bash", {"command": fence.group(1).strip()}))
    action = ACTION_RE.search(text)
    if action:
        name = action.group(1).lower()
        block = unfence(re.split(r"^[ \t]*OBSERVATION:", action.group(2), maxsplit=1, flags=re.I | re.M)[0].strip())
        first, _, rest = block.partition("\n")
        args = {"bash": {"command": block}, "read_file": {"path": first.strip()},
                "write_file": {"path": first.strip(), "content": unfence(rest)}, "finish": {"summary": block}}
        found.append((action.start(), name, args.get(name, {})))
    return min(found, key=lambda f: f[0])[1:] if found else None


# ---------------------------------------------------------------- the loop
class Agent:
    """The ReAct loop over an append-only message history."""

    def __init__(self, args: argparse.Namespace) -> None:
        base_url, self.model = os.environ.get("FORGE_BASE_URL", ""), os.environ.get("FORGE_MODEL", "")
        if not base_url or not self.model:
            raise AgentError("FORGE_BASE_URL and FORGE_MODEL must be set")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.headers = {"Content-Type": "application/json"}
        if key := os.environ.get("FORGE_API_KEY", ""):
            self.headers["Authorization"] = f"Bearer {key}"
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # FORGE_BASE_URL is direct
        self.http_timeout, self.tool_timeout = env_num("FORGE_HTTP_TIMEOUT", 300), env_num("FORGE_TOOL_TIMEOUT", 120)
        self.retries, self.max_tokens = int(env_num("FORGE_HTTP_RETRIES", 2)), int(env_num("FORGE_MAX_TOKENS", 1024))
        self.context_window = int(env_num("FORGE_CONTEXT_WINDOW", 0)) or None
        self.max_steps, self.temperature = args.max_steps, args.temperature
        prompt = SYSTEM_PROMPT if args.tools == "auto" else TEXT_PROMPT
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": prompt},
                                               {"role": "user", "content": args.instruction}]
        self.counted_tokens, self.counted_messages = 0, 0  # server-counted prefix of the history
        self.steps, self.use_tools = 0, args.tools == "auto"

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST a non-streamed Chat Completions request; retries connection errors, 429 and 5xx with backoff."""
        data = json.dumps(body).encode()
        for attempt in range(self.retries + 1):
            try:
                request = urllib.request.Request(self.url, data=data, headers=self.headers, method="POST")
                with self.opener.open(request, timeout=self.http_timeout) as resp:
                    raw = resp.read()
                break
            except urllib.error.HTTPError as exc:
                detail = exc.read().decode(errors="replace")[:1000]
                if exc.code in (400, 413) and re.search(r"context|too long", detail, re.I):
                    raise AgentError(f"HTTP {exc.code}: {detail}", context_full=True) from None
                if exc.code == 400 and "tools" in body and re.search(r"tool", detail, re.I):
                    raise ToolsRejected(f"HTTP 400: {detail}") from None
                if exc.code < 500 and exc.code != 429:
                    raise AgentError(f"HTTP {exc.code} from {self.url}: {detail}") from None
                problem = f"HTTP {exc.code}: {detail}"
            except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
                problem = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
            if attempt == self.retries:
                raise AgentError(f"{self.url} failed after {attempt + 1} attempts: {problem}")
            time.sleep(2.0 ** attempt)
        try:
            reply = json.loads(raw)
            if not isinstance(reply["choices"][0]["message"], dict):
                raise TypeError("message is not an object")
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise AgentError(f"invalid response ({exc}): {raw[:500].decode(errors='replace')}") from None
        return reply

    def output_budget(self) -> int | None:
        """max_tokens for the next request, or None when the context is too full to ask for anything useful."""
        if self.context_window is None:
            return self.max_tokens
        uncounted: list[Any] = self.messages[self.counted_messages:]
        if not self.counted_messages and self.use_tools:
            uncounted = [*uncounted, TOOLS]
        estimate = self.counted_tokens + sum(len(json.dumps(m)) / CHARS_PER_TOKEN + 8 for m in uncounted)
        room = int(self.context_window - estimate)
        return min(self.max_tokens, room) if room >= min(64, self.max_tokens) else None

    def run(self) -> tuple[str, str]:
        """Steps until finish / max steps / full context. Returns (status, summary)."""
        while self.steps < self.max_steps:
            budget = self.output_budget()
            if budget is None:
                return "context_full", "the next request would not fit in the context window"
            body: dict[str, Any] = {"model": self.model, "messages": self.messages, "max_tokens": budget}
            if self.use_tools:
                body.update(tools=TOOLS, tool_choice="auto")
            if self.temperature is not None:
                body["temperature"] = self.temperature
            try:
                reply = self.complete(body)
            except ToolsRejected as exc:
                self.use_tools = False
                emit({"type": "notice", "message": f"the server refuses tools; text protocol only ({exc})"})
                continue
            self.steps += 1
            summary = self.handle(reply)
            if summary is not None:
                return "finished", summary
        return "max_steps", ""

    def handle(self, reply: dict[str, Any]) -> str | None:
        """Append the assistant reply and the results of its actions; the summary if it called finish."""
        choice = reply["choices"][0]
        message, usage = choice["message"], reply.get("usage") or {}
        content = message.get("content") or ""
        calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
        assistant: dict[str, Any] = {"role": "assistant", "content": message.get("content") if calls else content}
        actions: list[tuple[str | None, str, Any]] = []  # (tool_call_id or None for text, tool, args or error)
        if calls:
            assistant["tool_calls"] = [{"id": c.get("id") or f"call_{self.steps}_{i}", "type": "function", "function": {
                "name": str((c.get("function") or {}).get("name", "")),
                "arguments": json_text((c.get("function") or {}).get("arguments"))}} for i, c in enumerate(calls)]
            actions = [(c["id"], c["function"]["name"], parse_arguments(c["function"]["arguments"]))
                       for c in assistant["tool_calls"]]
        elif (text_action := parse_text_action(content)) is not None:
            actions = [(None, *text_action)]
        self.messages.append(assistant)
        if isinstance(usage.get("total_tokens"), int):
            self.counted_tokens, self.counted_messages = usage["total_tokens"], len(self.messages)
        emit({"type": "step", "step": self.steps, "finish_reason": choice.get("finish_reason"),
              "mode": "structured" if calls else ("text" if actions else "none"), "content": clip(content, EVENT_LIMIT),
              "actions": [name for _, name, _ in actions], "usage": usage})
        if not actions:
            self.messages.append({"role": "user", "content": "No action found in your reply. Take one action: a ```bash"
                                  " block, <tool_call>{...}</tool_call>, or ACTION: <tool>. Use finish when done."})
        summary = None
        for call_id, name, args in actions:
            code = None
            if isinstance(args, str):
                result = f"error: invalid arguments for {name}: {args}"
            elif name == "finish":
                summary, result = str(args.get("summary", "")), "finished"
            else:
                result, code = run_tool(name, args, self.tool_timeout)
            event = {"type": "tool", "step": self.steps, "name": name, "mode": "structured" if call_id else "text",
                     "arguments": args, "result": clip(result, EVENT_LIMIT)}
            if name == "bash":
                event.update(exit_code=code, timed_out=result.startswith("timeout:"))
            emit(event)
            if call_id is not None:
                self.messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
            elif summary is None:
                self.messages.append({"role": "user", "content": f"Observation ({name}):\n{result}"})
        return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="forge-react", description="forge's minimal ReAct agent (Chat Completions).")
    parser.add_argument("--version", action="version", version=f"forge-react {VERSION}")
    parser.add_argument("--max-steps", type=int, default=20, help="most model calls (default 20)")
    parser.add_argument("--temperature", type=float, default=None, help="sampling temperature (server default)")
    parser.add_argument("--tools", choices=["auto", "text"], default="auto",
                        help="auto: send the tools as functions (text protocol as fallback); text: the text protocol "
                             "only (small models copy a tool schema back instead of calling it)")
    parser.add_argument("instruction", help="the task")
    args = parser.parse_args(argv)
    agent: Agent | None = None
    try:
        agent = Agent(args)
        status, summary = agent.run()
    except Exception as exc:  # AgentError, or a bug / unexpected reply shape: still end with a final event
        full = isinstance(exc, AgentError) and exc.context_full
        emit({"type": "final", "status": "context_full" if full else "error", "steps": agent.steps if agent else 0,
              "error": str(exc) if isinstance(exc, AgentError) else f"{type(exc).__name__}: {exc}"})
        return 0 if full else 1
    emit({"type": "final", "status": status, "steps": agent.steps, "summary": clip(summary, EVENT_LIMIT)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
