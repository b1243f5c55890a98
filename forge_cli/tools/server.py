"""The tool server: one HTTP server per ``forge rollout`` run, serving each registered rollout's tools.

Per rollout (key: ``Authorization: Bearer <key>``; unknown rollout or wrong key → 401):

- ``/r/<id>/mcp``: MCP Streamable HTTP (the official ``mcp`` SDK; one session manager per rollout)
- ``GET /r/<id>/tools``: the tool specs; ``POST /r/<id>/tools/<name>`` with the JSON arguments →
  ``{"result": ..., "is_error": bool}`` (what skill files describe for harnesses without MCP)

It runs uvicorn on its own event loop in a background thread, so any caller (sync or async) can use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import uvicorn
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Message, Receive, Scope, Send

from forge_cli.proxy.auth import new_secret, presented_key
from forge_cli.tools.mcp_endpoint import mcp_manager
from forge_cli.tools.rollout_tools import RolloutTools
from forge_cli.tools.spec import ToolSpec

T = TypeVar("T")
MAX_BODY = 4 << 20
START_TIMEOUT_S = 30.0
KEEP_ALIVE_S = 300
# headroom of a rollout's start on a loaded machine (beyond START_TIMEOUT_S), raised by a tool session that takes
# longer (its start_s: the browser 90 s, the desktop 900 s; its state_s likewise for the verifier's read)
LOADED_START_S = 90.0


@dataclass(frozen=True)
class ToolGrant:
    """What a rollout's harness is given: where its tools are and the key for them."""

    rollout_id: str
    key: str
    # http://<advertised host>:<port>/r/<rollout id>
    url: str

    @property
    def mcp_url(self) -> str:
        return f"{self.url}/mcp"


@dataclass
class _Entry:
    tools: RolloutTools
    manager: StreamableHTTPSessionManager
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


class ToolServer:
    """Serves the tools of every registered rollout of a run; ``with ToolServer(...) as server:`` starts/stops it."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, advertise_host: str | None = None) -> None:
        self.host = host
        self.advertise_host = advertise_host or host
        # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets whose proto says TCP, and without it every
        # answer on a kept-alive connection waited ~40 ms for the client's delayed ACK (Nagle): 44 ms per request
        self._sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM,
                                   socket.IPPROTO_TCP)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self.port: int = self._sock.getsockname()[1]
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._client: httpx.AsyncClient | None = None

    # ------------------------------------------------------------------ lifecycle
    @property
    def url(self) -> str:
        """Base URL as sandboxes reach it."""
        return f"http://{self.advertise_host}:{self.port}"

    def start(self) -> ToolServer:
        # listening before start() returns: uvicorn listens only once its loop runs serve(), and a client that
        # connected in between was refused (seen in CI: ECONNREFUSED right after the fixture started the server);
        # connections now wait in the backlog until the loop accepts them (asyncio's listen() again only resizes it)
        self._sock.listen(2048)
        ready = threading.Event()
        # keep-alive: a harness's MCP client calls again after the model's next turn (seconds to minutes), and under
        # load uvicorn's 5 s default fired before the event loop read a request already sent: the client's
        # connection was closed under it (benchmarks/tool_server.py, 1,000 rollouts at once)
        self._server = uvicorn.Server(uvicorn.Config(self._asgi, log_level="warning", lifespan="off", interface="asgi3",
                                                     access_log=False, timeout_keep_alive=KEEP_ALIVE_S))

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self._loop = loop
            self._client = httpx.AsyncClient()
            ready.set()
            try:
                assert self._server is not None
                loop.run_until_complete(self._server.serve(sockets=[self._sock]))
                loop.run_until_complete(self._client.aclose())
                # streams still open when the server stopped (SSE watchers) end here, not as warnings at exit
                pending = asyncio.all_tasks(loop)
                for task in pending:
                    task.cancel()
                if pending:
                    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name="forge-tool-server", daemon=True)
        self._thread.start()
        ready.wait(START_TIMEOUT_S)
        return self

    def stop(self) -> None:
        for rid in list(self._entries):
            with contextlib.suppress(Exception):
                self.unregister(rid)
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._sock.close()

    def __enter__(self) -> ToolServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self, coro: Callable[[], Awaitable[T]], timeout: float = START_TIMEOUT_S) -> T:
        assert self._loop is not None, "the tool server is not started"
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro(), self._loop)  # type: ignore[arg-type]
        return future.result(timeout)

    # ------------------------------------------------------------------ rollouts
    def register(self, rollout_id: str, tools: tuple[ToolSpec, ...], state: dict[str, Any] | None = None,
                 log_path: Path | None = None) -> ToolGrant:
        """Serve ``tools`` for ``rollout_id`` (builtin services seeded from ``state``); returns its URL and key."""
        assert self._client is not None, "the tool server is not started"
        key = new_secret("ft-")
        entry_tools = RolloutTools(rollout_id, key, tools, state or {}, log_path, self._client)
        entry = _Entry(entry_tools, mcp_manager(entry_tools))

        async def start() -> None:
            started = asyncio.Event()

            async def hold() -> None:
                async with entry.manager.run():
                    started.set()
                    await entry.stop.wait()

            entry.task = asyncio.create_task(hold())
            await started.wait()
            await entry_tools.start()

        with self._lock:
            if rollout_id in self._entries:
                raise ValueError(f"rollout {rollout_id} is already registered at the tool server")
            self._entries[rollout_id] = entry
        try:
            slowest = max([LOADED_START_S, *(t.start_s for t in entry_tools.sessions.values())])
            self._run(start, timeout=START_TIMEOUT_S + slowest)
        except BaseException:
            with contextlib.suppress(Exception):
                self.unregister(rollout_id)
            raise
        return ToolGrant(rollout_id, key, f"{self.url}/r/{rollout_id}")

    def state(self, rollout_id: str) -> dict[str, Any]:
        """Every dispatch, the builtin services' state and each tool session's (the browser's page, the desktop's
        score), for the verifier."""
        tools = self._entries[rollout_id].tools
        slowest = max([0.0, *(t.state_s for t in tools.sessions.values())])
        return self._run(tools.state, timeout=START_TIMEOUT_S + slowest)

    def browser_cdp_url(self, rollout_id: str) -> str | None:
        """The DevTools endpoint of the rollout's browser (None: it has none), for a harness's own browser tool."""
        browser = self._entries[rollout_id].tools.sessions.get("browser")
        cdp_url: str | None = getattr(browser, "cdp_url", None)
        return cdp_url

    def summary(self, rollout_id: str) -> dict[str, Any]:
        return self._entries[rollout_id].tools.summary()

    def unregister(self, rollout_id: str) -> dict[str, Any]:
        """Stop serving the rollout (later requests get 401); returns its summary."""
        with self._lock:
            entry = self._entries.pop(rollout_id)

        async def stop() -> None:
            entry.stop.set()
            try:
                await entry.tools.close()
            finally:
                if entry.task is not None:
                    await entry.task

        self._run(stop)
        return entry.tools.summary()

    # ------------------------------------------------------------------ HTTP
    async def _asgi(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        parts = scope["path"].strip("/").split("/")
        if parts == ["healthz"]:
            await JSONResponse({"ok": True, "rollouts": len(self._entries)})(scope, receive, send)
            return
        if len(parts) < 3 or parts[0] != "r":
            await JSONResponse({"error": "not found"}, status_code=404)(scope, receive, send)
            return
        entry = self._entries.get(parts[1])
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if entry is None or not entry.tools.authorized(presented_key(headers)):
            await JSONResponse({"error": "unknown rollout or wrong key"}, status_code=401,
                               headers={"WWW-Authenticate": "Bearer"})(scope, receive, send)
            return
        rest = parts[2:]
        if rest == ["mcp"]:
            await self._mcp(entry, scope, receive, send)
        elif rest[0] == "tools" and len(rest) <= 2:
            response = await self._rest(entry, Request(scope, receive), rest[1] if len(rest) == 2 else None)
            await response(scope, receive, send)
        else:
            await JSONResponse({"error": "not found"}, status_code=404)(scope, receive, send)

    async def _mcp(self, entry: _Entry, scope: Scope, receive: Receive, send: Send) -> None:
        """Note the JSON-RPC methods of a POST, then hand the request (body replayed) to the rollout's manager."""
        if scope["method"] != "POST":
            await entry.manager.handle_request(scope, receive, send)
            return
        body = b""
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > MAX_BODY:
                await JSONResponse({"error": "request body too large"}, status_code=413)(scope, receive, send)
                return
        with contextlib.suppress(ValueError):
            payload = json.loads(body)
            for msg in payload if isinstance(payload, list) else [payload]:
                if isinstance(msg, dict) and isinstance(msg.get("method"), str):
                    entry.tools.saw(msg["method"])
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await entry.manager.handle_request(scope, replay, send)

    async def _rest(self, entry: _Entry, request: Request, name: str | None) -> Response:
        tools = entry.tools
        if name is None:
            if request.method != "GET":
                return JSONResponse({"error": "GET lists the tools; POST /tools/<name> calls one"}, status_code=405)
            return JSONResponse({"tools": [t.model_dump(include={"name", "description", "input_schema"})
                                           for t in tools.tools.values()]})
        if name not in tools.tools:
            return JSONResponse({"error": f"unknown tool '{name}'", "tools": list(tools.tools)}, status_code=404)
        if request.method != "POST":
            return JSONResponse({"error": "POST the JSON arguments"}, status_code=405)
        raw = await request.body()
        try:
            arguments = json.loads(raw) if raw.strip() else {}
        except ValueError as exc:
            return JSONResponse({"error": f"the body is not JSON: {exc}"}, status_code=400)
        outcome = await tools.dispatch(name, arguments, "rest")
        return JSONResponse({"result": outcome.result, "is_error": outcome.is_error})
