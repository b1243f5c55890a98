"""Backends that execute one tool dispatch: ``http`` (an environment service) and ``builtin`` (in-process); the
backends with a lifetime of one rollout (the browser, the desktop, a package's own) are tool sessions
(``session.py``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Protocol

import httpx

from forge_cli.tools.services import SERVICES, Mailbox, ToolError
from forge_cli.tools.session import Outcome
from forge_cli.tools.spec import BuiltinBackendSpec, HttpBackendSpec, ToolSpec


class Backend(Protocol):
    async def call(self, tool: ToolSpec, arguments: dict[str, Any]) -> Outcome: ...


class HttpBackend:
    """POST the arguments as JSON to the tool's URL; 2xx → result (JSON, else text), anything else → tool error.

    The rollout id goes along as ``X-Forge-Rollout`` so one service can keep rollouts apart.
    """

    def __init__(self, rollout_id: str, client: httpx.AsyncClient) -> None:
        self.rollout_id = rollout_id
        self.client = client

    async def call(self, tool: ToolSpec, arguments: dict[str, Any]) -> Outcome:
        spec = tool.backend
        assert isinstance(spec, HttpBackendSpec)
        try:
            response = await self.client.post(spec.url, json=arguments, timeout=spec.timeout_s,
                                              headers={"X-Forge-Rollout": self.rollout_id, "X-Forge-Tool": tool.name})
        except httpx.HTTPError as exc:
            return Outcome(f"the {tool.name} service is unreachable: {type(exc).__name__}: {exc}", True)
        try:
            body: Any = response.json()
        except json.JSONDecodeError:
            body = response.text
        if response.is_success:
            return Outcome(body)
        return Outcome({"status": response.status_code, "error": body}, True)


class BuiltinBackend:
    """forge's in-process demo services, one instance per service per rollout."""

    def __init__(self, seed: dict[str, Any]) -> None:
        self.seed = seed
        self.services: dict[str, Mailbox] = {}
        self.lock = asyncio.Lock()

    def service(self, name: str) -> Mailbox:
        if name not in self.services:
            if name not in SERVICES:
                raise ToolError(f"forge has no builtin service '{name}' (has: {', '.join(SERVICES)})")
            self.services[name] = SERVICES[name](self.seed.get(name))
        return self.services[name]

    async def call(self, tool: ToolSpec, arguments: dict[str, Any]) -> Outcome:
        spec = tool.backend
        assert isinstance(spec, BuiltinBackendSpec)
        async with self.lock:
            try:
                return Outcome(self.service(spec.service).call(tool.name, arguments))
            except ToolError as exc:
                return Outcome(str(exc), True)

    def snapshot(self) -> dict[str, Any]:
        return {name: svc.snapshot() for name, svc in self.services.items()}
