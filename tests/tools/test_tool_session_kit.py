"""Tool sessions are plugins (``forge_cli/tools/session.py``): one defined in a package of its own registers by
name, a task's tools use it with no central list edited, and ``forge_cli.testing.tool_session`` (the conformance
kit such a package runs) passes it, fails each copy with one planted defect, and passes forge's own browser."""

from __future__ import annotations

import asyncio
import http.server
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from forge_cli.testing.tool_session import check_tool_session
from forge_cli.tools.rollout_tools import RolloutTools
from forge_cli.tools.session import TOOL_SESSIONS
from forge_cli.tools.spec import parse_tools
from tests.helpers import QuietHandler, install_module, serve_http, temporary_package
from tests.requires import requires

PLUGIN = '''
from forge_cli.tools.session import Outcome, ToolSession


class Counter(ToolSession, kind="counter-plugin"):
    """A counter per rollout, started at tool_state.counter-plugin.start."""

    async def start(self):
        self.value = int(self.setup.get("start", 0))

    async def call(self, name, arguments):
        if name != "add":
            return Outcome(f"no tool {name}", True)
        self.value += int(arguments.get("n", 1))
        return Outcome({"value": self.value})

    async def state(self):
        return {"value": getattr(self, "value", None)}

    async def close(self):
        self.value = None
'''

DEFECTS = {
    "raises on an unknown tool": ('            return Outcome(f"no tool {name}", True)',
                                  '            raise KeyError(name)'),
    "state is not JSON": ('        return {"value": getattr(self, "value", None)}',
                          '        return {"value": object()}'),
    "answers a plain dict": ('        return Outcome({"value": self.value})', '        return {"value": self.value}'),
    "close fails the second time": ('        self.value = None', '        del self.value'),
}
WHAT = {"raises on an unknown tool": "an unknown tool raised KeyError", "state is not JSON": "state() is not JSON",
        "answers a plain dict": "call add returned dict", "close fails the second time": "a second close raised"}


@pytest.fixture
def plugin_package(tmp_path: Path) -> Iterator[Path]:
    with temporary_package(tmp_path, "counter_tools") as package:
        yield package
    TOOL_SESSIONS.remove("counter-plugin")


def test_a_packages_session_registers_passes_the_kit_and_serves_a_task(plugin_package: Path,
                                                                        tmp_path: Path) -> None:
    install_module(plugin_package, "counter", PLUGIN)
    assert "counter-plugin" in TOOL_SESSIONS.names()
    problems = asyncio.run(check_tool_session("counter-plugin", {"start": 5}, [("add", {"n": 2})], tmp_path / "log"))
    assert problems == []
    # a task's tool names the kind; the rollout's tools start it from tool_state and the verifier reads its state
    tools = parse_tools([{"name": "add", "description": "add n", "backend": {"kind": "counter-plugin"},
                          "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}}}], "task.yaml")

    async def rollout() -> dict[str, Any]:
        async with httpx.AsyncClient() as client:
            mine = RolloutTools("r1", "key", tools, {"counter-plugin": {"start": 10}}, tmp_path / "calls.jsonl",
                                client)
            await mine.start()
            try:
                outcome = await mine.dispatch("add", {"n": 3}, "http")
                assert outcome.result == {"value": 13} and not outcome.is_error
                return await mine.state()
            finally:
                await mine.close()

    assert asyncio.run(rollout())["services"]["counter-plugin"] == {"value": 13}


@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_the_kit_fails_a_session_with_one_planted_defect(defect: str, plugin_package: Path, tmp_path: Path) -> None:
    good, bad = DEFECTS[defect]
    assert good in PLUGIN
    install_module(plugin_package, "counter", PLUGIN.replace(good, bad))
    problems = asyncio.run(check_tool_session("counter-plugin", {}, [("add", {"n": 1})], tmp_path / "log"))
    assert any(WHAT[defect] in p for p in problems), problems


def test_an_unregistered_kind_is_one_message_naming_the_registered_ones() -> None:
    problems = asyncio.run(check_tool_session("no-such-session", {}, [], Path("/nonexistent")))
    assert len(problems) == 1 and "browser" in problems[0] and "desktop" in problems[0], problems


def test_forges_browser_passes_the_kit(tmp_path: Path) -> None:
    requires("web")

    class Page(QuietHandler):
        def do_GET(self) -> None:
            body = b"<html><body><button onclick=\"window.clicked=1\">Go</button></body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(body)

    server: http.server.ThreadingHTTPServer
    server, url = serve_http(Page)
    try:
        problems = asyncio.run(check_tool_session(
            "browser", {"url": url, "state_js": "window.clicked || 0"}, [("browser_snapshot", {})], tmp_path / "log"))
    finally:
        server.shutdown()
    assert problems == []
