"""The rollout's own desktop as a tool session (``backend: {kind: desktop}``): an OSWorld-style container
(:class:`~forge_cli.desktop.session.DesktopSession`) started and set up before the harness; an action becomes
pyautogui code (``actions.py``) run by its in-VM server, observations read its screenshot or accessibility tree;
its state is the OSWorld score."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from forge_cli.desktop.session import DesktopSession
from forge_cli.tools.session import Outcome, ToolSession


class DesktopToolSession(ToolSession, kind="desktop"):
    # its container, then OSWorld's own setup of the task (downloads, apps, sleeps); its scoring likewise
    start_s = 900.0
    state_s = 900.0

    def __init__(self, setup: dict[str, Any], log_dir: Path | None, rollout_id: str) -> None:
        super().__init__(setup, log_dir, rollout_id)
        self.session = DesktopSession(setup, log_dir, rollout_id)

    async def start(self) -> None:
        await self.session.start()

    async def call(self, name: str, arguments: dict[str, Any]) -> Outcome:
        answer = await self.session.call(name, arguments)
        return Outcome(answer.text, answer.is_error, answer.images)

    async def state(self) -> dict[str, Any]:
        return await self.session.state()

    async def close(self) -> None:
        await self.session.close()
