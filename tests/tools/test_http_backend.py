"""The ``http`` backend against a real loopback HTTP service (a stand-in for a Claw-Eval mock service)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from forge_cli.tools.server import ToolServer
from forge_cli.tools.spec import parse_tools
from tests.helpers import QuietHandler, serve_http


class _Calendar(QuietHandler):
    """POST /events adds an event (JSON body) per rollout; POST /fail answers 500."""

    events: dict[str, list[dict[str, Any]]] = {}

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/fail":
            self._send(500, {"error": "calendar is down"})
            return
        rollout = self.headers["X-Forge-Rollout"]
        self.events.setdefault(rollout, []).append(body)
        self._send(200, {"created": len(self.events[rollout]), "tool": self.headers["X-Forge-Tool"]})

    def _send(self, status: int, payload: Any) -> None:
        self.reply(status, json.dumps(payload).encode())


@pytest.fixture
def calendar() -> Iterator[str]:
    server, url = serve_http(_Calendar)
    yield url
    server.shutdown()
    server.server_close()


def _tools(calendar: str) -> Any:
    schema = {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}
    return parse_tools([
        {"name": "create_event", "description": "Create a calendar event.", "input_schema": schema,
         "backend": {"kind": "http", "url": f"{calendar}/events"}},
        {"name": "broken", "description": "Always fails.", "input_schema": schema,
         "backend": {"kind": "http", "url": f"{calendar}/fail"}},
        {"name": "gone", "description": "Nobody listens.", "input_schema": schema,
         "backend": {"kind": "http", "url": "http://127.0.0.1:9/x", "timeout_s": 5}},
    ], "test")


def test_http_backend_forwards_over_mcp_and_rest(calendar: str, tool_server: ToolServer, tmp_path: Path) -> None:
    grant = tool_server.register("r-cal", _tools(calendar), log_path=tmp_path / "calls.jsonl")
    other = tool_server.register("r-other", _tools(calendar))

    async def over_mcp() -> list[Any]:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {grant.key}"}) as http, \
                Client(streamable_http_client(grant.mcp_url, http_client=http), mode="legacy") as client:  # type: ignore[arg-type]
            return [await client.call_tool("create_event", {"title": "review"}),
                    await client.call_tool("broken", {"title": "x"}),
                    await client.call_tool("gone", {"title": "x"})]

    created, broken, gone = anyio.run(over_mcp)
    assert not created.is_error and json.loads(created.content[0].text) == {"created": 1, "tool": "create_event"}
    assert broken.is_error and "calendar is down" in broken.content[0].text and "500" in broken.content[0].text
    assert gone.is_error and "unreachable" in gone.content[0].text
    rest = httpx.post(f"{grant.url}/tools/create_event", json={"title": "lunch"},
                      headers={"Authorization": f"Bearer {grant.key}"}).json()
    assert rest == {"result": {"created": 2, "tool": "create_event"}, "is_error": False}
    httpx.post(f"{other.url}/tools/create_event", json={"title": "other"},
               headers={"Authorization": f"Bearer {other.key}"})
    # the service got the JSON arguments as sent, per rollout (X-Forge-Rollout)
    assert _Calendar.events["r-cal"] == [{"title": "review"}, {"title": "lunch"}]
    assert _Calendar.events["r-other"] == [{"title": "other"}]
    records = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert [(r["tool"], r["is_error"], r["transport"]) for r in records] == [
        ("create_event", False, "mcp"), ("broken", True, "mcp"), ("gone", True, "mcp"), ("create_event", False, "rest")]
