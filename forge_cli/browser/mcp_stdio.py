"""A small MCP client over stdio (newline-delimited JSON-RPC 2.0): initialize, tools/list, tools/call.

forge drives one ``@playwright/mcp`` process per rollout with it from the tool server's event loop. The official
SDK's client session lives inside an anyio task group that must be entered and left by the same task; a rollout's
session is opened by one request and used by many others, so this client keeps no task of its own beyond a
reader, and every call is a plain coroutine.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

from forge_cli.browser.chromium import pdeathsig, stop_group

PROTOCOL_VERSION = "2025-06-18"
# one JSON-RPC message per line; a full-page screenshot in base64 is a few MB
LINE_LIMIT = 64 << 20


class McpError(Exception):
    """The MCP server answered with an error, died, or did not answer in time."""


class StdioMcpClient:
    """One MCP server process and its session."""

    def __init__(self, process: asyncio.subprocess.Process, stderr_path: Path) -> None:
        self.process = process
        self.stderr_path = stderr_path
        self._next_id = 0
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader = asyncio.create_task(self._read())
        self._write_lock = asyncio.Lock()

    @classmethod
    async def start(cls, argv: list[str], *, cwd: Path, env: dict[str, str], stderr_path: Path,
                    timeout: float = 60.0) -> StdioMcpClient:
        """Spawn the server (own process group, dies with the thread that started it) and initialize the session."""
        cwd.mkdir(parents=True, exist_ok=True)
        with stderr_path.open("ab") as err:
            process = await asyncio.create_subprocess_exec(
                *argv, cwd=cwd, env=env, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=err,
                limit=LINE_LIMIT, start_new_session=True, preexec_fn=pdeathsig)
        client = cls(process, stderr_path)
        try:
            await client.request("initialize", {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                                                "clientInfo": {"name": "forge", "version": "1"}}, timeout=timeout)
            await client.notify("notifications/initialized")
        except BaseException:
            await client.close()
            raise
        return client

    async def _read(self) -> None:
        assert self.process.stdout is not None
        try:
            while True:
                line = await self.process.stdout.readline()
                if not line:
                    break
                with contextlib.suppress(ValueError):
                    message = json.loads(line)
                    key = message.get("id") if isinstance(message, dict) else None
                    waiter = self._waiting.pop(key, None) if isinstance(key, int) else None
                    if waiter is not None and not waiter.done():
                        waiter.set_result(message)
        finally:
            for waiter in self._waiting.values():
                if not waiter.done():
                    waiter.set_exception(McpError(f"the MCP server exited (see {self.stderr_path})"))
            self._waiting.clear()

    async def _send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        async with self._write_lock:
            try:
                self.process.stdin.write(json.dumps(message).encode() + b"\n")
                await self.process.stdin.drain()
            except (BrokenPipeError, ConnectionResetError) as exc:
                raise McpError(f"the MCP server is gone ({exc}; see {self.stderr_path})") from None

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        await self._send({"jsonrpc": "2.0", "method": method, **({"params": params} if params else {})})

    async def request(self, method: str, params: dict[str, Any] | None = None, timeout: float = 60.0) -> Any:
        """The ``result`` of one request; McpError for an error answer, a dead server or a timeout."""
        if self._reader.done():
            raise McpError(f"the MCP server exited (see {self.stderr_path})")
        self._next_id += 1
        request_id = self._next_id
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = waiter
        await self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}})
        try:
            answer = await asyncio.wait_for(waiter, timeout)
        except TimeoutError:
            self._waiting.pop(request_id, None)
            raise McpError(f"{method} got no answer within {timeout:.0f}s") from None
        if "error" in answer:
            error = answer["error"]
            raise McpError(f"{method}: {error.get('message', error) if isinstance(error, dict) else error}")
        return answer.get("result")

    async def list_tools(self) -> list[dict[str, Any]]:
        result = await self.request("tools/list")
        return list(result.get("tools", []))

    async def call_tool(self, name: str, arguments: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
        """A ``CallToolResult`` as a dict: ``content`` parts (text, image) and ``isError``."""
        return dict(await self.request("tools/call", {"name": name, "arguments": arguments}, timeout=timeout))

    async def close(self) -> None:
        """End the server: close its stdin, then its process group (TERM, then KILL)."""
        if self.process.stdin is not None:
            with contextlib.suppress(Exception):
                self.process.stdin.close()
        await stop_group(self.process)
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._reader
