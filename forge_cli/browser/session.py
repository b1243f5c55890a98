"""One rollout's browser: a fresh Chromium, the task's page opened and set up by forge, and an ``@playwright/mcp``
server attached to it that executes the agent's browser tool calls.

What a task asks for (its ``tool_state.browser``):

- ``url``: the page the rollout starts on (required);
- ``setup_js``: an expression forge evaluates once the page has loaded, before the harness starts (e.g. start a
  MiniWoB++ episode with a seed); its value is kept as ``setup`` in the state the task source and verifier read;
- ``state_js``: an expression whose value is the page's state for the verifier (e.g. the MiniWoB++ reward),
  evaluated when the verifier asks, after the harness's processes were killed;
- ``chromium``: the browser executable (default: the first Chromium on PATH);
- ``screenshots``: true to keep the trajectory forge's own way, a screenshot after every action of the agent and one
  at the end (``browser/step-NNN.png``; what web judges look at), listed in the state.

Files per rollout (``<run dir>/rollouts/<id>/``): ``browser/`` (screenshots and console logs the server saved),
``browser.log`` (Chromium's output), ``browser-mcp.log`` (the server's); every tool call is in ``tool_calls.jsonl``.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forge_cli.browser import cdp, playwright_mcp
from forge_cli.browser.chromium import BrowserError, Chromium, chromium_path
from forge_cli.browser.mcp_stdio import McpError, StdioMcpClient
from forge_cli.browser.tools import BROWSER_TOOLS, DEFAULT_ARGUMENTS

LOAD_TIMEOUT_S = 30.0
# tools that only look: no screenshot of the trajectory after them
PASSIVE = frozenset({"browser_snapshot", "browser_take_screenshot", "browser_wait_for"})
CALL_TIMEOUT_S = 60.0
# the generated-code section of the server's answers: tokens the agent does not need
_CODE_SECTION = re.compile(r"### Ran Playwright code\n```\w*\n.*?```\n?", re.DOTALL)
# after an action the server writes the page's new snapshot to a file and answers with a link to it: the agent, in
# its sandbox, cannot open that file, so forge puts the snapshot in the answer
_SNAPSHOT_LINK = re.compile(r"^- \[Snapshot\]\(([^)\n]+\.yml)\)$", re.MULTILINE)
# links to the console log files the server keeps (in the rollout's browser/ directory, not the agent's)
_CONSOLE_LINK = re.compile(r"^- New console entries: .*\n?", re.MULTILINE)


@dataclass(frozen=True)
class ToolAnswer:
    """A browser tool's answer: its text, images (media type, base64) and whether it is an error."""

    text: str
    images: tuple[tuple[str, str], ...] = ()
    is_error: bool = False


@dataclass
class BrowserSession:
    """The browser of one rollout; ``start()`` before the harness runs, ``close()`` after it is verified."""

    setup: dict[str, Any]
    log_dir: Path | None
    chromium: Chromium | None = None
    client: StdioMcpClient | None = None
    setup_result: Any = None
    screenshots: list[str] = field(default_factory=list)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _final_taken: bool = False

    @property
    def directory(self) -> Path:
        return self.log_dir if self.log_dir is not None else Path.cwd()

    async def start(self) -> None:
        """Browser, page, task setup, tool server; BrowserError (an infra error of the rollout) when any fails."""
        url = self.setup.get("url")
        if not isinstance(url, str) or not url:
            raise BrowserError("the task's tool_state.browser has no url")
        self.chromium = await Chromium.start(chromium_path(self.setup.get("chromium")),
                                             self.directory / "browser.log", url)
        await self._wait_loaded(url)
        if self.setup.get("setup_js"):
            self.setup_result = await cdp.evaluate(self.chromium.cdp_url, str(self.setup["setup_js"]))
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
        try:
            self.client = await StdioMcpClient.start(playwright_mcp.server_argv(self.chromium.cdp_url),
                                                     cwd=self.directory, env=env,
                                                     stderr_path=self.directory / "browser-mcp.log")
            offered = {t.get("name") for t in await self.client.list_tools()}
        except McpError as exc:
            raise BrowserError(f"the browser tool server did not start: {exc}") from None
        missing = [t.name for t in BROWSER_TOOLS if t.name not in offered]
        if missing:
            raise BrowserError(f"{playwright_mcp.PACKAGE} lacks the tools {', '.join(missing)}")

    async def _wait_loaded(self, url: str) -> None:
        assert self.chromium is not None
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while True:
            try:
                # the tab shows about:blank for a moment before the page given on the command line
                loaded = await cdp.evaluate(self.chromium.cdp_url, "[document.readyState, location.href]")
                if loaded and loaded[0] == "complete" and loaded[1] not in ("about:blank", ""):
                    return
            except BrowserError:
                if time.monotonic() > deadline:
                    raise
            if time.monotonic() > deadline:
                raise BrowserError(f"{url} did not finish loading within {LOAD_TIMEOUT_S:.0f}s")
            await asyncio.sleep(0.1)

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolAnswer:
        """One browser tool call of the agent (one at a time per rollout: a page has one mouse)."""
        if self.client is None:
            return ToolAnswer("the browser is not running", is_error=True)
        if name == "browser_navigate" and not str(arguments.get("url", "")).startswith(("http://", "https://")):
            # javascript: and file: URLs would run the agent's code in the page or read the machine's files
            return ToolAnswer("browser_navigate opens http:// and https:// URLs only", is_error=True)
        async with self._lock:
            try:
                result = await self.client.call_tool(name, {**DEFAULT_ARGUMENTS.get(name, {}), **arguments},
                                                     timeout=CALL_TIMEOUT_S)
            except McpError as exc:
                return ToolAnswer(f"the browser did not carry out {name}: {exc}", is_error=True)
        if self.setup.get("screenshots") and name not in PASSIVE:
            await self._keep_screenshot()
        texts, images = [], []
        for part in result.get("content") or []:
            if part.get("type") == "text":
                texts.append(self._readable(str(part.get("text", ""))))
            elif part.get("type") == "image" and isinstance(part.get("data"), str):
                images.append((str(part.get("mimeType") or "image/png"), part["data"]))
        return ToolAnswer("\n".join(texts).strip(), tuple(images), bool(result.get("isError")))

    def _readable(self, text: str) -> str:
        """The server's answer as the agent needs it: no generated code, no links to forge's files, the page's
        snapshot inline."""
        def inline(match: re.Match[str]) -> str:
            path = (self.directory / match.group(1)).resolve()
            if not path.is_relative_to(self.directory.resolve()):
                return match.group(0)
            try:
                return "```yaml\n" + path.read_text(encoding="utf-8", errors="replace").rstrip() + "\n```"
            except OSError:
                return match.group(0)

        text = _CONSOLE_LINK.sub("", _CODE_SECTION.sub("", text))
        return _SNAPSHOT_LINK.sub(inline, text).replace("### Events\n\n", "").strip()

    async def _keep_screenshot(self) -> None:
        if self.chromium is None:
            return
        path = self.directory / "browser" / f"step-{len(self.screenshots):03d}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.write_bytes(await cdp.screenshot(self.chromium.cdp_url))
        except BrowserError:  # a page between two documents: the next action's screenshot shows it
            return
        self.screenshots.append(str(path))

    async def state(self) -> dict[str, Any]:
        """What the verifier reads: the page's state (``state_js``), the setup's value, the page's URL and, with
        ``screenshots``, the trajectory's screenshots (the last one taken now)."""
        out: dict[str, Any] = {"setup": self.setup_result, "url": None, "state": None, "screenshots": []}
        if self.chromium is None:
            return out
        if self.setup.get("screenshots") and not self._final_taken:
            await self._keep_screenshot()
            self._final_taken = True
        out["screenshots"] = list(self.screenshots)
        out["url"] = await cdp.evaluate(self.chromium.cdp_url, "location.href")
        if self.setup.get("state_js"):
            out["state"] = await cdp.evaluate(self.chromium.cdp_url, str(self.setup["state_js"]))
        return out

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()
            self.client = None
        if self.chromium is not None:
            await self.chromium.stop()
            self.chromium = None
