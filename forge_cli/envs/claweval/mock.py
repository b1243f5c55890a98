"""Claw-Eval's mock services per rollout, and the router that forwards a rollout's tool calls to them.

Each rollout gets its own processes of the task's ``services`` (``mock_services/<svc>/server.py``, run from the
checkout root as Claw-Eval's ``ServiceManager`` runs them, with the interpreter of forge's Claw-Eval environment),
each on a free port of its own (Claw-Eval's ``apply_port_offset`` shifts ``localhost:<port>`` in every URL; forge
maps each declared port to a fresh one instead, so concurrent rollouts never meet a healthy service of another
rollout, which ``ServiceManager`` would silently reuse). ``ERROR_RATE=0`` is set for every service (a task's own
``env`` may still set it). Health checks send ``X-Health-Check: 1``; a fresh process per trial is Claw-Eval's
``POST /<svc>/reset`` between trials, and the reset is also sent once the service is healthy.

The router is one HTTP server per forge process: the tool server's ``http`` backend POSTs a tool call to
``<router>/t/<tool>`` with ``X-Forge-Rollout``; the router forwards it to that rollout's endpoint (the task's
``tool_endpoints`` URL, port mapped, with the task's method) and records it as Claw-Eval's ``ToolDispatch``
(request and response bodies, HTTP status, latency), answering with the service's status and body.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
LOCAL_URL = re.compile(r"(localhost|127\.0\.0\.1):(\d+)")


class MockServiceError(Exception):
    """A task's mock service did not start or did not become healthy (an infra error of the rollout)."""


def now() -> str:
    return datetime.now(UTC).isoformat()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def remap(url: str, ports: dict[int, int]) -> str:
    """``url`` with each ``localhost:<declared port>`` replaced by ``127.0.0.1:<the rollout's port>``."""
    return LOCAL_URL.sub(lambda m: f"127.0.0.1:{ports.get(int(m.group(2)), int(m.group(2)))}", url)


@dataclass
class RolloutMocks:
    """One rollout's services, endpoints and dispatches."""

    rollout_id: str
    task: dict[str, Any]
    ports: dict[int, int]
    processes: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)
    dispatches: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    started: float = field(default_factory=time.time)

    def endpoint(self, tool: str) -> tuple[str, str] | None:
        for ep in self.task.get("tool_endpoints") or []:
            if ep.get("tool_name") == tool:
                return remap(str(ep["url"]), self.ports), str(ep.get("method") or "POST").upper()
        return None

    def audit(self) -> dict[str, dict[str, Any]]:
        """``GET /<svc>/audit`` of each service with a reset endpoint, as Claw-Eval's loop snapshots it."""
        out: dict[str, dict[str, Any]] = {}
        for svc in self.task.get("services") or []:
            reset = svc.get("reset_endpoint")
            if not reset:
                continue
            url = remap(str(reset).rsplit("/reset", 1)[0] + "/audit", self.ports)
            with contextlib.suppress(Exception):
                out[svc["name"]] = {"url": url, "data": httpx.get(url, timeout=5, trust_env=False).json()}
        return out

    def stop(self) -> None:
        for _, proc in reversed(self.processes):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=5)
        self.processes.clear()


def _healthy(svc: dict[str, Any], ports: dict[int, int]) -> bool:
    url = remap(str(svc["health_check"]), ports)
    try:
        with httpx.Client(trust_env=False, timeout=2.0) as client:
            method = str(svc.get("health_check_method") or "POST").upper()
            resp = client.request(method, url, headers={"X-Health-Check": "1"})
        return resp.status_code < 500
    except httpx.HTTPError:
        return False


def start_services(rollout_id: str, task: dict[str, Any], checkout: Path, python: str, log_dir: Path) -> RolloutMocks:
    """Start the task's services for one rollout (blocking); MockServiceError when one does not come up."""
    services = task.get("services") or []
    mocks = RolloutMocks(rollout_id, task, {int(s["port"]): free_port() for s in services})
    log_dir.mkdir(parents=True, exist_ok=True)
    base = {k: v for k, v in os.environ.items() if k not in PROXY_VARS}
    try:
        for svc in services:
            port = mocks.ports[int(svc["port"])]
            argv = shlex.split(str(svc["command"]))
            if argv and argv[0] in ("python", "python3"):
                argv[0] = python
            env = {**base, "ERROR_RATE": "0", **{k: str(v) for k, v in (svc.get("env") or {}).items()},
                   "PORT": str(port), "PYTHONUNBUFFERED": "1"}
            log_path = log_dir / f"{svc['name']}.log"
            with log_path.open("ab") as log:
                proc = subprocess.Popen(argv, cwd=checkout, env=env, stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
            mocks.processes.append((svc["name"], proc))
            deadline = time.monotonic() + max(float(svc.get("ready_timeout") or 10), 30.0)
            while not _healthy(svc, mocks.ports):
                if proc.poll() is not None:
                    tail = log_path.read_text(errors="replace")[-1500:]
                    raise MockServiceError(f"Claw-Eval service {svc['name']} exited with code {proc.returncode} "
                                           f"before it was ready; {log_path} ends:\n{tail}")
                if time.monotonic() > deadline:
                    raise MockServiceError(f"Claw-Eval service {svc['name']} was not healthy on port {port} "
                                           f"(log: {log_path})")
                time.sleep(0.2)
            if svc.get("reset_endpoint"):
                httpx.post(remap(str(svc["reset_endpoint"]), mocks.ports), timeout=5, trust_env=False)
    except BaseException:
        mocks.stop()
        raise
    return mocks


class Router:
    """The process's router from tool calls to each rollout's mock services (see the module docstring)."""

    _instance: Router | None = None
    _guard = threading.Lock()

    def __init__(self) -> None:
        self.rollouts: dict[str, RolloutMocks] = {}
        self.client = httpx.Client(timeout=30.0, trust_env=False)
        router = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b"{}"
                status, payload = router.forward(self.headers.get("X-Forge-Rollout") or "",
                                                 self.path.rpartition("/")[2], body)
                data = json.dumps(payload, ensure_ascii=False, default=str).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, name="claweval-router", daemon=True).start()

    @classmethod
    def get(cls) -> Router:
        with cls._guard:
            if cls._instance is None:
                cls._instance = Router()
            return cls._instance

    def tool_url(self, tool: str) -> str:
        return f"{self.url}/t/{tool}"

    def add(self, mocks: RolloutMocks) -> None:
        self.rollouts[mocks.rollout_id] = mocks

    def remove(self, rollout_id: str) -> RolloutMocks | None:
        mocks = self.rollouts.pop(rollout_id, None)
        if mocks is not None:
            mocks.stop()
        return mocks

    def stop_all(self) -> None:
        for rollout_id in list(self.rollouts):
            self.remove(rollout_id)

    def forward(self, rollout_id: str, tool: str, raw: bytes) -> tuple[int, Any]:
        mocks = self.rollouts.get(rollout_id)
        if mocks is None:
            return 404, {"error": f"no Claw-Eval services for rollout '{rollout_id}'"}
        try:
            arguments = json.loads(raw or b"{}")
        except ValueError:
            arguments = {}
        dispatch: dict[str, Any] = {"type": "tool_dispatch", "tool_use_id": f"forge_{uuid.uuid4().hex[:12]}",
                                    "tool_name": tool, "endpoint_url": "", "request_body": arguments,
                                    "response_status": 404, "response_body": None, "latency_ms": 0.0}
        target = mocks.endpoint(tool)
        started = time.monotonic()
        if target is None:  # as Claw-Eval's ToolDispatcher answers a tool without an endpoint
            dispatch["response_body"] = {"error": f"unknown tool '{tool}'"}
        else:
            url, method = target
            dispatch["endpoint_url"] = url
            try:
                resp = self.client.request(method, url, json=arguments)
                dispatch["response_status"] = resp.status_code
                try:
                    dispatch["response_body"] = resp.json()
                except ValueError:
                    dispatch["response_body"] = resp.text
            except Exception as exc:  # Claw-Eval records an unreachable service as status 500
                dispatch["response_status"], dispatch["response_body"] = 500, {"error": str(exc)}
        dispatch["latency_ms"] = (time.monotonic() - started) * 1000
        dispatch["timestamp"] = now()
        with mocks.lock:
            mocks.dispatches.append(dispatch)
        return int(dispatch["response_status"]), dispatch["response_body"]
