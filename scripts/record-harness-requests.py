#!/usr/bin/env python3
"""Record what each installed harness really sends: the fixtures in tests/fixtures/harness_requests/.

    .venv/bin/python scripts/record-harness-requests.py [HARNESS ...] [--out DIR] [--timeout S]

Starts a loopback HTTP server that answers every wire format plausibly (Chat Completions, Responses
API, Anthropic Messages and the Gemini API; streamed or not; a short text answer with proper stream
termination), runs each installed harness bundle's one-shot command against it (config files, env and
argv rendered from configs/harness/<name>.yaml, in a scratch HOME), and writes the first requests of each
harness as <out>/<harness>.json, scrubbed of the key, host, port and machine paths. Install the
bundles first: `forge harness install NAME`. Only loopback traffic; nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from forge_cli.config.schema import HarnessConfig  # noqa: E402
from forge_cli.harness.bundle_paths import bundle_dir  # noqa: E402
from forge_cli.harness.bundles import known_harnesses, load_harness, read_manifest  # noqa: E402
from forge_cli.harness.proc import SYSTEM_PATH  # noqa: E402
from forge_cli.harness.templates import render  # noqa: E402

API_KEY = "forge-recording-key-0123456789"
MODEL = "policy"
ANSWER = "Done."
INSTRUCTION = "Create a file named hello.txt that contains the word hello."
KEPT = 3  # requests kept per harness (opencode's first call is a tool-less title call)
SECRET_HEADERS = {"authorization", "x-api-key", "cookie", "proxy-authorization", "x-goog-api-key"}
RUN_ID = "rec0001"


# ---------------------------------------------------------------- answers per wire format
def sse(events: list[tuple[str | None, Any]]) -> bytes:
    out = []
    for name, data in events:
        payload = data if isinstance(data, str) else json.dumps(data)
        out.append((f"event: {name}\n" if name else "") + f"data: {payload}\n\n")
    return "".join(out).encode()


def chat_answer(body: dict[str, Any]) -> tuple[str, bytes]:
    created = int(time.time())
    usage = {"prompt_tokens": 100, "completion_tokens": 2, "total_tokens": 102}
    if not body.get("stream"):
        return "application/json", json.dumps({
            "id": "chatcmpl-rec", "object": "chat.completion", "created": created, "model": body.get("model", MODEL),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": ANSWER}, "finish_reason": "stop"}],
            "usage": usage}).encode()
    base = {"id": "chatcmpl-rec", "object": "chat.completion.chunk", "created": created,
            "model": body.get("model", MODEL)}
    events: list[tuple[str | None, Any]] = [
        (None, {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                     "finish_reason": None}]}),
        (None, {**base, "choices": [{"index": 0, "delta": {"content": ANSWER}, "finish_reason": None}]}),
        (None, {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
    ]
    if (body.get("stream_options") or {}).get("include_usage"):
        events.append((None, {**base, "choices": [], "usage": usage}))
    events.append((None, "[DONE]"))
    return "text/event-stream", sse(events)


def responses_answer(body: dict[str, Any]) -> tuple[str, bytes]:
    message = {"id": "msg_rec", "type": "message", "status": "completed", "role": "assistant",
               "content": [{"type": "output_text", "text": ANSWER, "annotations": []}]}
    response = {"id": "resp_rec", "object": "response", "created_at": int(time.time()), "status": "completed",
                "model": body.get("model", MODEL), "output": [message],
                "usage": {"input_tokens": 100, "output_tokens": 2, "total_tokens": 102,
                          "input_tokens_details": {"cached_tokens": 0},
                          "output_tokens_details": {"reasoning_tokens": 0}}}
    if not body.get("stream"):
        return "application/json", json.dumps(response).encode()
    pending = {**response, "status": "in_progress", "output": [], "usage": None}
    part = {"type": "output_text", "text": "", "annotations": []}
    events: list[tuple[str | None, Any]] = [
        ("response.created", {"type": "response.created", "sequence_number": 0, "response": pending}),
        ("response.in_progress", {"type": "response.in_progress", "sequence_number": 1, "response": pending}),
        ("response.output_item.added", {"type": "response.output_item.added", "sequence_number": 2,
                                        "output_index": 0, "item": {**message, "status": "in_progress",
                                                                    "content": []}}),
        ("response.content_part.added", {"type": "response.content_part.added", "sequence_number": 3,
                                         "item_id": "msg_rec", "output_index": 0, "content_index": 0, "part": part}),
        ("response.output_text.delta", {"type": "response.output_text.delta", "sequence_number": 4,
                                        "item_id": "msg_rec", "output_index": 0, "content_index": 0,
                                        "delta": ANSWER}),
        ("response.output_text.done", {"type": "response.output_text.done", "sequence_number": 5,
                                       "item_id": "msg_rec", "output_index": 0, "content_index": 0, "text": ANSWER}),
        ("response.content_part.done", {"type": "response.content_part.done", "sequence_number": 6,
                                        "item_id": "msg_rec", "output_index": 0, "content_index": 0,
                                        "part": {**part, "text": ANSWER}}),
        ("response.output_item.done", {"type": "response.output_item.done", "sequence_number": 7,
                                       "output_index": 0, "item": message}),
        ("response.completed", {"type": "response.completed", "sequence_number": 8, "response": response}),
    ]
    return "text/event-stream", sse(events)


def messages_answer(body: dict[str, Any]) -> tuple[str, bytes]:
    usage = {"input_tokens": 100, "output_tokens": 2, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    message = {"id": "msg_rec", "type": "message", "role": "assistant", "model": body.get("model", MODEL),
               "content": [{"type": "text", "text": ANSWER}], "stop_reason": "end_turn", "stop_sequence": None,
               "usage": usage}
    if not body.get("stream"):
        return "application/json", json.dumps(message).encode()
    events: list[tuple[str | None, Any]] = [
        ("message_start", {"type": "message_start", "message": {**message, "content": [], "stop_reason": None,
                                                                "usage": {**usage, "output_tokens": 1}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("ping", {"type": "ping"}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": ANSWER}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": {"output_tokens": 2}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    return "text/event-stream", sse(events)


def gemini_answer(path: str, body: dict[str, Any]) -> tuple[str, bytes]:
    usage = {"promptTokenCount": 100, "candidatesTokenCount": 2, "totalTokenCount": 102}
    response = {"candidates": [{"content": {"role": "model", "parts": [{"text": ANSWER}]}, "finishReason": "STOP",
                                "index": 0}], "usageMetadata": usage, "modelVersion": MODEL, "responseId": "rec"}
    if ":streamGenerateContent" not in path:
        return "application/json", json.dumps(response).encode()
    return "text/event-stream", sse([(None, response)])


def answer(path: str, body: dict[str, Any]) -> tuple[int, str, bytes]:
    route = path.split("?", 1)[0].rstrip("/")
    if route.endswith(":countTokens"):
        return 200, "application/json", json.dumps({"totalTokens": 100}).encode()
    if route.endswith((":generateContent", ":streamGenerateContent")):
        return 200, *gemini_answer(path, body)
    if route.endswith("/chat/completions"):
        return 200, *chat_answer(body)
    if route.endswith("/responses"):
        return 200, *responses_answer(body)
    if route.endswith("/messages/count_tokens"):
        return 200, "application/json", json.dumps({"input_tokens": 100}).encode()
    if route.endswith("/messages"):
        return 200, *messages_answer(body)
    error = {"error": {"message": f"no route {route}", "type": "not_found"}}
    return 404, "application/json", json.dumps(error).encode()


# ---------------------------------------------------------------- the recording server
class Recorder(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def take(self) -> list[dict[str, Any]]:
        with self.lock:
            taken, self.requests = self.requests, []
        return taken


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Recorder

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _handle(self) -> None:
        raw = self._body() if self.command in ("POST", "PUT") else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = {"_unparsed": raw[:2000].decode(errors="replace")}
        headers = {k.lower(): v for k, v in self.headers.items() if k.lower() not in SECRET_HEADERS}
        auth = [k.lower() for k in self.headers if k.lower() in SECRET_HEADERS]
        with self.server.lock:
            self.server.requests.append({"method": self.command, "path": self.path, "headers": headers,
                                         "credential_headers": sorted(auth), "body": body,
                                         "at": time.monotonic()})
        if self.command == "GET" and self.path.split("?")[0].rstrip("/").endswith("/models"):
            status, ctype, payload = 200, "application/json", json.dumps(
                {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "forge"}]}).encode()
        else:
            status, ctype, payload = answer(self.path, body if isinstance(body, dict) else {})
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(payload)))
        if ctype == "text/event-stream":
            self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()

    do_POST = do_GET = do_PUT = _handle


# ---------------------------------------------------------------- scrubbing
def scrubber(pairs: list[tuple[str, str]], words: list[tuple[str, str]]) -> Any:
    """A function replacing machine-specific strings in a JSON value: ``pairs`` anywhere (paths, URLs,
    the key), ``words`` only as whole words (host name, kernel release: short and could be a substring)."""
    ordered = sorted((p for p in pairs if p[0]), key=lambda p: -len(p[0]))
    bounded = [(re.compile(rf"(?<![\w.-]){re.escape(old)}(?![\w-])"), new) for old, new in words if old]

    def scrub(value: Any) -> Any:
        if isinstance(value, str):
            for old, new in ordered:
                value = value.replace(old, new)
            for pattern, new in bounded:
                value = pattern.sub(new, value)
            return value
        if isinstance(value, list):
            return [scrub(v) for v in value]
        if isinstance(value, dict):
            return {scrub(k): scrub(v) for k, v in value.items()}
        return value

    return scrub


# ---------------------------------------------------------------- running one harness
# where a container sees the bundle, HOME and the workspace (--docker)
IN_CONTAINER = {"bundle": "/opt/forge/harness", "home": "/home/forge", "workdir": "/work"}


def record(harness: HarnessConfig, server: Recorder, timeout: float, keep_dir: Path | None,
           image: str | None = None) -> dict[str, Any]:
    bundle = bundle_dir(harness)
    manifest = read_manifest(bundle / "manifest.json")
    if manifest is None:
        raise RuntimeError(f"{harness.name} is not installed (forge harness install {harness.name})")
    scratch = Path(tempfile.mkdtemp(prefix=f"forge-rec-{harness.name}-"))
    home, workdir = scratch / "home", scratch / "work"
    home.mkdir()
    workdir.mkdir()
    host = {"bundle": str(bundle), "home": str(home), "workdir": str(workdir)}
    seen = IN_CONTAINER if image else host  # the paths the harness sees
    root = f"{server.url}/r/{RUN_ID}"
    values = {"base_url": f"{root}/v1", "base_url_root": root, "api_key": API_KEY, "model": MODEL,
              "context_window": "32768", "max_output_tokens": "1024", "instruction": INSTRUCTION,
              "rollout_id": RUN_ID, **seen}
    for spec in harness.config_files:
        path = render(spec.path, values).replace(seen["home"], str(home), 1)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(render(spec.template, values))
    env = {"HOME": seen["home"], "PATH": f"{seen['bundle']}/bin:{SYSTEM_PATH}", "LANG": "C.UTF-8", "TERM": "dumb",
           "NO_COLOR": "1", **{k: render(v, values) for k, v in harness.env.items()}}
    argv = [render(arg, values) for arg in harness.command]
    name = f"forge-rec-{harness.name}-{os.getpid()}"
    if image:
        # the bundle read-only, HOME and workspace writable, host network (the recorder is on loopback)
        argv = ["docker", "run", "--rm", "--name", name, "--network", "host", "--read-only", "--tmpfs", "/tmp",
                "-v", f"{bundle}:{seen['bundle']}:ro", "-v", f"{home}:{seen['home']}",
                "-v", f"{workdir}:{seen['workdir']}",
                "-w", seen["workdir"], *[f"--env={k}={v}" for k, v in env.items()], image, *argv]
        env = {**os.environ, "PATH": os.environ.get("PATH", SYSTEM_PATH)}
    server.take()
    started = time.monotonic()
    proc = subprocess.Popen(argv, env=env, cwd=workdir, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        status = f"exit {proc.returncode}"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        if image:
            subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
        out, err = proc.communicate()
        status = f"killed after {timeout:.0f} s"
    elapsed = time.monotonic() - started
    requests = [r for r in server.take() if r["method"] == "POST"]
    if keep_dir is not None:
        keep_dir.mkdir(parents=True, exist_ok=True)
        (keep_dir / f"{harness.name}.stdout").write_bytes(out)
        (keep_dir / f"{harness.name}.stderr").write_bytes(err)
        (keep_dir / f"{harness.name}.all.json").write_text(json.dumps(requests, indent=1))
    print(f"{harness.name}: {status} in {elapsed:.1f} s, {len(requests)} request(s)", file=sys.stderr)
    if not requests:
        tail = (err or out).decode(errors="replace").strip().splitlines()[-5:]
        raise RuntimeError(f"{harness.name} sent no request ({status}): " + " | ".join(tail))
    scrub = scrubber([
        (API_KEY, "<api-key>"), (server.url, "http://forge-proxy"),
        (f"127.0.0.1:{server.server_address[1]}", "forge-proxy"),
        (str(workdir), "/work"), (str(home), "/home/forge"), (str(bundle), "/opt/forge/harness"),
        (str(scratch), "/tmp/forge"), (str(ROOT), "/src/forge"), (str(Path.home()) + "/", "/home/forge/"),
    ], [(socket.gethostname(), "sandbox"), (os.uname().release, "<kernel-release>")])
    first_at = requests[0]["at"]
    kept = []
    for req in requests[:KEPT]:
        kept.append(scrub({"method": req["method"], "path": req["path"], "headers": req["headers"],
                           "credential_headers": req["credential_headers"], "body": req["body"],
                           "seconds_after_first": round(req["at"] - first_at, 2)}))
    return {
        "harness": harness.name,
        "package": f"{harness.package.name}@{harness.package.version}",
        "version_output": manifest.get("version_output"),
        "wire_api": harness.wire_api,
        "instruction": INSTRUCTION,
        "answer": ANSWER,
        "requests_seen": len(requests),
        "run_status": status,
        # the first request; `requests` holds the first few in arrival order (this one first)
        "path": kept[0]["path"],
        "body": kept[0]["body"],
        "requests": kept,
    }


def isolate_network() -> None:
    """Re-run this script in its own network namespace with only loopback up (when ``unshare`` works
    here), so that nothing a harness tries besides the recorder can leave the machine."""
    if os.environ.get("FORGE_RECORD_NETNS") or not shutil.which("unshare") or not shutil.which("ip"):
        return
    flags = ["-n"] if os.geteuid() == 0 else ["-r", "-n"]
    probe = subprocess.run(["unshare", *flags, "ip", "link", "set", "lo", "up"], capture_output=True, check=False)
    if probe.returncode != 0:
        print("note: no network namespace available; harnesses may reach beyond loopback", file=sys.stderr)
        return
    os.environ["FORGE_RECORD_NETNS"] = "1"
    script = 'ip link set lo up && exec "$0" "$@"'
    os.execvp("unshare", ["unshare", *flags, "sh", "-c", script, sys.executable, *sys.argv])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("harnesses", nargs="*", help="harness names (default: every installed npm/PyPI bundle)")
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "harness_requests")
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds before a harness run is killed")
    parser.add_argument("--keep", type=Path, default=None, help="also keep stdout/stderr/all requests here")
    parser.add_argument("--share-network", action="store_true",
                        help="do not run the harnesses in a loopback-only network namespace")
    parser.add_argument("--docker", metavar="IMAGE", default=None,
                        help="run each harness in a container of IMAGE with its bundle mounted read-only at "
                             "/opt/forge/harness (host network, so implies --share-network)")
    args = parser.parse_args()
    if not args.share_network and not args.docker:
        isolate_network()
    names = args.harnesses or [n for n in sorted(known_harnesses())
                               if load_harness(n).package.manager in ("npm", "pypi")
                               and read_manifest(bundle_dir(load_harness(n)) / "manifest.json")]
    server = Recorder()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    args.out.mkdir(parents=True, exist_ok=True)
    failed = []
    for name in names:
        try:
            fixture = record(load_harness(name), server, args.timeout, args.keep, args.docker)
        except RuntimeError as exc:
            print(f"{name}: NOT recorded: {exc}", file=sys.stderr)
            failed.append(name)
            continue
        (args.out / f"{name}.json").write_text(json.dumps(fixture, indent=1, ensure_ascii=False) + "\n")
    server.shutdown()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
