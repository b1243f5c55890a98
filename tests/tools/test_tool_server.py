"""The tool server driven by the official ``mcp`` client SDK over Streamable HTTP, and by plain HTTP (REST)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from forge_cli.envs.task import Task
from forge_cli.tools.server import ToolGrant, ToolServer

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "test", "version": "1"}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def _session(grant: ToolGrant, mode: str, body: Any) -> Any:
    """Open an MCP session with the official client (bearer key), run ``body(client)``, return its value."""
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {grant.key}"}) as http, \
            Client(streamable_http_client(grant.mcp_url, http_client=http), mode=mode) as client:  # type: ignore[arg-type]
        return await body(client)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_mcp_client_lists_and_calls_the_tasks_tools(tool_server: ToolServer, mail_task: Task, tmp_path: Path,
                                                     mode: str) -> None:
    log = tmp_path / "tool_calls.jsonl"
    grant = tool_server.register("r-mail", mail_task.tools, mail_task.tool_state, log)

    async def body(client: Client) -> dict[str, Any]:
        listed = await client.list_tools()
        inbox = await client.call_tool("list_inbox", {})
        read = await client.call_tool("read_email", {"id": "2"})
        missing = await client.call_tool("read_email", {"id": "99"})
        invalid = await client.call_tool("send_email", {"to": "alice@example.com"})
        sent = await client.call_tool("send_email", {"to": "alice@example.com", "subject": "Re", "body": "Room 4B"})
        return {"tools": {t.name: t.input_schema for t in listed.tools}, "inbox": inbox, "read": read,
                "missing": missing, "invalid": invalid, "sent": sent}

    got = anyio.run(_session, grant, mode, body)
    # tools/list: the task's tools with their schemas, as declared
    assert got["tools"] == {t.name: t.input_schema for t in mail_task.tools}
    # tools/call forwarded to the backend (forge's builtin mailbox) and its result returned
    assert [m["id"] for m in json.loads(got["inbox"].content[0].text)] == ["1", "2"]
    assert not got["read"].is_error and "room 4B" in got["read"].content[0].text
    # tool errors are MCP tool errors (isError), not protocol errors: the backend's and a schema violation
    assert got["missing"].is_error and "no email with id '99'" in got["missing"].content[0].text
    assert got["invalid"].is_error and "'subject' is a required property" in got["invalid"].content[0].text
    assert not got["sent"].is_error and json.loads(got["sent"].content[0].text)["status"] == "sent"
    # the initialize handshake (legacy) or its modern equivalent, then tools/list and the calls, were seen
    summary = tool_server.summary("r-mail")
    assert summary["mcp_methods"]["tools/list"] == 1 and summary["mcp_methods"]["tools/call"] == 5
    if mode == "legacy":
        assert summary["mcp_methods"]["initialize"] == 1
    # every dispatch recorded durably, in order, with transport and timings
    records = _lines(log)
    assert [(r["seq"], r["tool"], r["is_error"], r["transport"]) for r in records] == [
        (0, "list_inbox", False, "mcp"), (1, "read_email", False, "mcp"), (2, "read_email", True, "mcp"),
        (3, "send_email", True, "mcp"), (4, "send_email", False, "mcp")]
    assert records[1]["arguments"] == {"id": "2"} and records[1]["result"]["from"] == "bob@example.com"
    assert all(r["t_start"] <= r["t_end"] for r in records)
    # the verifier's view: every dispatch plus the mailbox's final state
    state = tool_server.state("r-mail")
    assert state["services"]["mailbox"]["sent"] == [
        {"id": "sent-1", "to": "alice@example.com", "subject": "Re", "body": "Room 4B"}]
    assert tool_server.unregister("r-mail")["calls"] == 5


def test_wrong_key_or_unknown_rollout_is_401(tool_server: ToolServer, mail_task: Task) -> None:
    grant = tool_server.register("r-auth", mail_task.tools, mail_task.tool_state)
    base = tool_server.url
    cases = [(f"{base}/r/r-auth/mcp", "ft-wrong"), (f"{base}/r/r-auth/mcp", None),
             (f"{base}/r/nosuch/mcp", grant.key), (f"{base}/r/r-auth/tools/list_inbox", "ft-wrong"),
             (f"{base}/r/nosuch/tools/list_inbox", grant.key)]
    for url, key in cases:
        headers = {**MCP_HEADERS, **({"Authorization": f"Bearer {key}"} if key else {})}
        response = httpx.post(url, json=INITIALIZE if url.endswith("/mcp") else {}, headers=headers)
        assert response.status_code == 401, (url, key, response.text)
    assert tool_server.summary("r-auth") == {"calls": 0, "errors": 0, "by_tool": {}, "mcp_methods": {}}
    # once unregistered, the rollout's own key no longer opens anything
    tool_server.unregister("r-auth")
    response = httpx.post(grant.mcp_url, json=INITIALIZE,
                          headers={**MCP_HEADERS, "Authorization": f"Bearer {grant.key}"})
    assert response.status_code == 401

    async def connect() -> None:
        async with httpx2.AsyncClient(headers={"Authorization": "Bearer ft-wrong"}) as http, \
                Client(streamable_http_client(grant.mcp_url, http_client=http), mode="legacy"):  # type: ignore[arg-type]
            pass

    with pytest.raises(BaseException):  # noqa: B017 - the SDK wraps the 401 in its own exception group
        anyio.run(connect)


def test_rest_face_dispatches_and_records_the_same(tool_server: ToolServer, mail_task: Task, tmp_path: Path) -> None:
    log = tmp_path / "tool_calls.jsonl"
    grant = tool_server.register("r-rest", mail_task.tools, mail_task.tool_state, log)
    auth = {"Authorization": f"Bearer {grant.key}"}
    listed = httpx.get(f"{grant.url}/tools", headers=auth).json()
    assert [t["name"] for t in listed["tools"]] == ["list_inbox", "read_email", "send_email"]
    assert listed["tools"][1]["input_schema"]["required"] == ["id"]
    ok = httpx.post(f"{grant.url}/tools/read_email", json={"id": "1"}, headers=auth)
    assert ok.status_code == 200 and ok.json()["is_error"] is False
    assert ok.json()["result"]["from"] == "alice@example.com"
    error = httpx.post(f"{grant.url}/tools/read_email", json={"id": 7}, headers=auth).json()
    assert error["is_error"] is True and "is not of type 'string'" in error["result"]
    assert httpx.post(f"{grant.url}/tools/nosuch", json={}, headers=auth).status_code == 404
    assert httpx.post(f"{grant.url}/tools/read_email", content=b"{not json", headers=auth).status_code == 400
    records = _lines(log)
    assert [(r["tool"], r["is_error"], r["transport"]) for r in records] == [
        ("read_email", False, "rest"), ("read_email", True, "rest")]
    assert tool_server.state("r-rest")["services"]["mailbox"]["inbox"][0]["read"] is True


def test_concurrent_rollouts_keep_their_dispatches_apart(tool_server: ToolServer, mail_task: Task,
                                                         tmp_path: Path) -> None:
    rollouts = [f"r-{i}" for i in range(6)]
    grants = {rid: tool_server.register(rid, mail_task.tools, mail_task.tool_state, tmp_path / rid / "calls.jsonl")
              for rid in rollouts}

    async def one(rid: str, n: int) -> None:
        async def body(client: Client) -> None:
            await client.list_tools()
            for i in range(n):
                await client.call_tool("send_email", {"to": f"{rid}@example.com", "subject": str(i), "body": rid})
        await _session(grants[rid], "legacy", body)

    async def rest(rid: str, n: int) -> None:
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {grants[rid].key}"}) as http:
            for i in range(n):
                response = await http.post(f"{grants[rid].url}/tools/send_email",
                                           json={"to": f"{rid}@example.com", "subject": str(i), "body": rid})
                assert response.json()["is_error"] is False

    async def main() -> None:
        await asyncio.gather(*(one(rid, i + 1) if i % 2 == 0 else rest(rid, i + 1)
                               for i, rid in enumerate(rollouts)))

    asyncio.run(main())
    for i, rid in enumerate(rollouts):
        records = _lines(tmp_path / rid / "calls.jsonl")
        assert len(records) == i + 1 and [r["seq"] for r in records] == list(range(i + 1))
        assert {r["arguments"]["to"] for r in records} == {f"{rid}@example.com"}
        assert {r["transport"] for r in records} == {"mcp" if i % 2 == 0 else "rest"}
        sent = tool_server.state(rid)["services"]["mailbox"]["sent"]
        assert [m["body"] for m in sent] == [rid] * (i + 1)
        assert tool_server.unregister(rid)["calls"] == i + 1


def test_answers_are_not_held_back_by_nagle(tool_server: ToolServer) -> None:
    """The listening socket says it is TCP, so asyncio sets TCP_NODELAY on every connection: an answer written in
    two parts on a kept-alive connection once waited ~40 ms for the client's delayed ACK (benchmarks/tool_server.py
    measured 44 ms per /healthz, 1.1 ms after)."""
    import socket

    assert tool_server._sock.proto == socket.IPPROTO_TCP
    with socket.create_connection(("127.0.0.1", tool_server.port)) as client:
        client.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        assert client.recv(65536).startswith(b"HTTP/1.1 200")
