"""One rollout's tools at the tool server: its key, backends, dispatch log and the MCP methods it saw."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import jsonschema

from forge_cli.proxy.auth import digest, matches
from forge_cli.tools.backends import BuiltinBackend, HttpBackend, Outcome
from forge_cli.tools.calllog import ToolCallLog, Transport
from forge_cli.tools.session import TOOL_SESSIONS, ToolSession
from forge_cli.tools.spec import BuiltinBackendSpec, HttpBackendSpec, SessionBackendSpec, ToolSpec


class RolloutTools:
    """Dispatches a rollout's tool calls to their backends, validating arguments and recording each one."""

    def __init__(self, rollout_id: str, key: str, tools: tuple[ToolSpec, ...], state: dict[str, Any],
                 log_path: Path | None, client: httpx.AsyncClient) -> None:
        self.rollout_id = rollout_id
        self._key = digest(key)
        self.tools = {t.name: t for t in tools}
        self.builtin = BuiltinBackend(state)
        # every builtin service exists from the start, so its state is there for the verifier even if unused
        for tool in tools:
            if isinstance(tool.backend, BuiltinBackendSpec):
                self.builtin.service(tool.backend.service)
        self.http = HttpBackend(rollout_id, client)
        # one session per kind the tools name (the rollout's own browser, desktop, ...), set up from the task's
        # tool_state.<kind>, in the order the tools first name them
        kinds = dict.fromkeys(t.backend.kind for t in tools if isinstance(t.backend, SessionBackendSpec))
        self.sessions: dict[str, ToolSession] = {
            kind: TOOL_SESSIONS.get(kind)(dict(state.get(kind) or {}), log_path.parent if log_path else None,
                                          rollout_id) for kind in kinds}
        self.log = ToolCallLog(log_path)
        self.mcp_methods: Counter[str] = Counter()
        self._lock = threading.Lock()

    def authorized(self, presented: str | None) -> bool:
        return matches(presented, self._key)

    def saw(self, method: str) -> None:
        """Count one MCP JSON-RPC method this rollout's client sent (initialize, tools/list, ...)."""
        with self._lock:
            self.mcp_methods[method] += 1

    async def start(self) -> None:
        """Start what must run before the harness (the tool sessions: browser, desktop, ...); raises when one
        cannot (an infra error)."""
        for session in self.sessions.values():
            await session.start()

    async def close(self) -> None:
        """Close every session, each even when another one's close fails (the first failure is raised)."""
        failure: BaseException | None = None
        for session in self.sessions.values():
            try:
                await session.close()
            except BaseException as exc:
                failure = failure or exc
        if failure is not None:
            raise failure

    async def _call(self, tool: ToolSpec, arguments: dict[str, Any]) -> Outcome:
        backend = tool.backend
        if isinstance(backend, SessionBackendSpec):
            return await self.sessions[backend.kind].call(tool.name, arguments)
        if isinstance(backend, HttpBackendSpec):
            return await self.http.call(tool, arguments)
        return await self.builtin.call(tool, arguments)

    async def dispatch(self, name: str, arguments: Any, transport: Transport) -> Outcome:
        """Run one call of a known tool and record it; bad arguments are a tool error (recorded too)."""
        tool = self.tools[name]
        started = time.time()
        problems = _schema_errors(tool.input_schema, arguments)
        if problems:
            outcome = Outcome(f"invalid arguments for {name}: {problems}", True)
        else:
            try:
                outcome = await self._call(tool, arguments)
            except Exception as exc:  # a backend bug must not take the server down; the agent sees an error
                outcome = Outcome(f"{type(exc).__name__}: {exc}", True)
        logged = outcome.result if not outcome.images else \
            {"text": outcome.result, "images": [f"{mime}, {len(data) * 3 // 4} bytes" for mime, data in outcome.images]}
        self.log.append(name, arguments, logged, outcome.is_error, transport, started, time.time())
        return outcome

    def summary(self) -> dict[str, Any]:
        """For the rollout result: dispatch counts and the MCP methods seen."""
        calls = self.log.records()
        with self._lock:
            methods = dict(self.mcp_methods)
        return {"calls": len(calls), "errors": sum(1 for c in calls if c["is_error"]),
                "by_tool": dict(Counter(c["tool"] for c in calls)), "mcp_methods": methods}

    async def state(self) -> dict[str, Any]:
        """What a verifier reads: every dispatch, the final state of the builtin services and each session's state
        under its kind (``services.browser``: the page's setup value, URL and ``state_js`` value;
        ``services.desktop``: the OSWorld score)."""
        services = self.builtin.snapshot()
        for kind, session in self.sessions.items():
            services[kind] = await session.state()
        return {"rollout_id": self.rollout_id, "calls": self.log.records(), "services": services}


def _schema_errors(schema: dict[str, Any], arguments: Any) -> str:
    if not isinstance(arguments, dict):
        return f"arguments must be a JSON object, got {json.dumps(arguments)[:80]}"
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(arguments), key=lambda e: list(e.path))
    return "; ".join(e.message for e in errors[:5])
