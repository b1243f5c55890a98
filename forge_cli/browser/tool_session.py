"""The rollout's own browser as a tool session (``backend: {kind: browser}``): each call goes to its
``@playwright/mcp`` server (:class:`~forge_cli.browser.session.BrowserSession`); the page it opens and the script
that reads its state come from the task's ``tool_state.browser``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from forge_cli.browser.session import BrowserSession
from forge_cli.tools.session import Outcome, ToolSession


class BrowserToolSession(ToolSession, kind="browser"):
    start_s = 90.0  # Chromium, its page and @playwright/mcp on a loaded machine

    def __init__(self, setup: dict[str, Any], log_dir: Path | None, rollout_id: str) -> None:
        super().__init__(setup, log_dir, rollout_id)
        self.session = BrowserSession(setup, log_dir)

    @property
    def cdp_url(self) -> str | None:
        """The DevTools endpoint of the rollout's browser, for a harness's own browser tool (None: not started)."""
        chromium = self.session.chromium
        return chromium.cdp_url if chromium is not None else None

    async def start(self) -> None:
        await self.session.start()

    async def call(self, name: str, arguments: dict[str, Any]) -> Outcome:
        answer = await self.session.call(name, arguments)
        return Outcome(answer.text, answer.is_error, answer.images)

    async def state(self) -> dict[str, Any]:
        return await self.session.state()

    async def close(self) -> None:
        await self.session.close()
