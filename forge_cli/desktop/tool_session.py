"""The rollout's own desktop as a tool session (``backend: {kind: desktop}``): an OSWorld-style container
(:class:`~forge_cli.desktop.session.DesktopSession`) started and set up before the harness; an action becomes
pyautogui code (``actions.py``) run by its in-VM server, observations read its screenshot or accessibility tree;
its state is the OSWorld score."""

from __future__ import annotations

from forge_cli.desktop.session import DesktopSession
from forge_cli.tools.session import BackendToolSession


class DesktopToolSession(BackendToolSession, kind="desktop"):
    # its container, then OSWorld's own setup of the task (downloads, apps, sleeps); its scoring likewise
    start_s = 900.0
    state_s = 900.0
    backend: DesktopSession

    def make(self) -> DesktopSession:
        return DesktopSession(self.setup, self.log_dir, self.rollout_id)
