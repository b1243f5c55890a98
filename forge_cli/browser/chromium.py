"""One headless Chromium per rollout: its own profile directory (no cookie, storage or cache shared with another
rollout), its DevTools (CDP) port on loopback, killed with its process group when the rollout ends.

Debian's ``chromium`` (``apt-get install -y chromium``; ``scripts/setup.sh chromium``) is the browser: Playwright's
own browser downloads are not needed, its drivers attach to this one over CDP.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from forge_cli.errors import UserError

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
INSTALL = "apt-get install -y chromium   (or: scripts/setup.sh chromium)"
START_TIMEOUT_S = 30.0
# a viewport every MiniWoB++ page and most sites fit; screenshots are this size
WINDOW = (1280, 800)


class BrowserError(Exception):
    """The browser did not start or stopped answering (an infra error of the rollout)."""


def chromium_path(configured: str | None = None) -> str:
    """The Chromium executable: ``configured`` when given, else the first of CANDIDATES on PATH; UserError (exit 1,
    the machine needs it) with the install command when there is none."""
    if configured:
        if os.path.isfile(configured) and os.access(configured, os.X_OK):
            return configured
        raise UserError(f"browser: {configured} is not an executable file", fix=f"install Chromium: {INSTALL}")
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    raise UserError("browser tasks need Chromium, and none is installed on this machine", fix=INSTALL)


def chromium_argv(executable: str, profile: Path, url: str = "about:blank") -> list[str]:
    """Headless Chromium with CDP on an ephemeral loopback port (written to ``<profile>/DevToolsActivePort``)."""
    return [executable, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--no-default-browser-check", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--mute-audio", "--hide-scrollbars",
            "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
            f"--window-size={WINDOW[0]},{WINDOW[1]}", f"--user-data-dir={profile}", url]


@dataclass
class Chromium:
    """A running browser: its process, profile directory and CDP endpoint."""

    process: asyncio.subprocess.Process
    profile: Path
    cdp_port: int
    log_path: Path

    @property
    def cdp_url(self) -> str:
        return f"http://127.0.0.1:{self.cdp_port}"

    @classmethod
    async def start(cls, executable: str, log_path: Path, url: str = "about:blank") -> Chromium:
        """Start a browser on a fresh profile and wait for its CDP port (BrowserError when it does not come up)."""
        profile = Path(tempfile.mkdtemp(prefix="forge-chromium-"))
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log:
            process = await asyncio.create_subprocess_exec(
                *chromium_argv(executable, profile, url), stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True, preexec_fn=pdeathsig)
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if process.returncode is not None:
                shutil.rmtree(profile, ignore_errors=True)
                raise BrowserError(f"chromium exited with {process.returncode} at start (see {log_path})")
            with contextlib.suppress(OSError, ValueError, IndexError):
                port = int(port_file.read_text().splitlines()[0])
                return cls(process, profile, port, log_path)
            await asyncio.sleep(0.05)
        browser = cls(process, profile, 0, log_path)
        await browser.stop()
        raise BrowserError(f"chromium did not open its DevTools port within {START_TIMEOUT_S:.0f}s (see {log_path})")

    async def stop(self) -> None:
        """Kill the browser's process group (renderers included) and delete its profile."""
        await stop_group(self.process)
        shutil.rmtree(self.profile, ignore_errors=True)


async def stop_group(process: asyncio.subprocess.Process, grace_s: float = 5.0) -> None:
    """End a process started in its own session and everything in its group: TERM, then KILL after ``grace_s``;
    the group is killed even when its leader already exited (a crashed browser's renderers)."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), grace_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    await process.wait()


def pdeathsig() -> None:  # pragma: no cover - runs in the child between fork and exec
    """The browser dies when the thread that started it does: the tool server's loop thread lives for the whole
    run, so a forge killed with SIGKILL leaves no browser behind."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
