"""The MCP face of one rollout's tools: an official-SDK lowlevel server and its Streamable HTTP session manager."""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from forge_cli.tools.rollout_tools import RolloutTools

SERVER_NAME = "forge-tools"


def result_text(result: Any) -> str:
    """A tool result as the agent reads it: strings as they are, anything else as JSON."""
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)


def mcp_manager(tools: RolloutTools) -> StreamableHTTPSessionManager:
    """A session manager serving ``tools`` over MCP Streamable HTTP (enter its ``run()`` before serving)."""

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[
            types.Tool(name=t.name, description=t.description, input_schema=t.input_schema)
            for t in tools.tools.values()])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name not in tools.tools:
            return types.CallToolResult(
                content=[types.TextContent(text=f"unknown tool '{params.name}' (tools: {', '.join(tools.tools)})")],
                is_error=True)
        outcome = await tools.dispatch(params.name, params.arguments or {}, "mcp")
        content: list[types.TextContent | types.ImageContent | types.AudioContent | types.ResourceLink
                      | types.EmbeddedResource] = [types.TextContent(text=result_text(outcome.result))]
        content += [types.ImageContent(data=data, mime_type=mime) for mime, data in outcome.images]
        return types.CallToolResult(content=content, is_error=outcome.is_error)

    server: Server[Any] = Server(SERVER_NAME, version="1", on_list_tools=list_tools, on_call_tool=call_tool,
                                 instructions="Tools of the current task, served by forge.")
    # no OpenTelemetry spans per message: nothing exports them here
    server.middleware = []
    return StreamableHTTPSessionManager(app=server, session_idle_timeout=None)
