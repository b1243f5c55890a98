"""The rollout's own browser as a tool session (``backend: {kind: browser}``): each call goes to its
``@playwright/mcp`` server (:class:`~forge_cli.browser.session.BrowserSession`); the page it opens and the script
that reads its state come from the task's ``tool_state.browser``."""

from __future__ import annotations

from forge_cli.browser.session import BrowserSession
from forge_cli.tools.session import BackendToolSession


class BrowserToolSession(BackendToolSession, kind="browser"):
    start_s = 90.0  # Chromium, its page and @playwright/mcp on a loaded machine
    backend: BrowserSession

    def make(self) -> BrowserSession:
        return BrowserSession(self.setup, self.log_dir)

    @property
    def cdp_url(self) -> str | None:
        """The DevTools endpoint of the rollout's browser, for a harness's own browser tool (None: not started)."""
        chromium = self.backend.chromium
        return chromium.cdp_url if chromium is not None else None
