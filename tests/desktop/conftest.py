"""Fixtures for tests/desktop: forge's desktop server (forge_cli/desktop/image/server/server.py) on this host.

`desktop_server` (session-scoped) is the base URL, "http://127.0.0.1:<port>", of server.py run with this
interpreter under a private Xvfb display (a free display number chosen by Xvfb itself, 1280x800x24, -noreset so
the screen keeps its state between X connections, no window manager) with HOME set to a fresh temporary directory
(holding Desktop/). Xvfb and the server are stopped at the end of the session. `desktop_session` gives the same
server with its display, home and log file, for tests that need them. Both need the part ``desktop-host``
(tests/requires.py: Xvfb, xterm, ... and pyautogui, python-xlib in .venv, which ``scripts/setup.sh osworld``
installs); without it they skip with that command, or fail under CI=true.

(Pillow comes with the dev environment already.) The at-spi bindings are not needed: without them /accessibility
answers 500 with its one-line reason, which the contract tests check.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.requires import requires

SERVER_DIR = Path(__file__).resolve().parents[2] / "forge_cli" / "desktop" / "image" / "server"
SCREEN = (1280, 800)


@dataclass(frozen=True)
class DesktopSession:
    url: str  # http://127.0.0.1:<port>
    display: str  # ":<n>"
    home: Path  # the server's HOME
    log: Path  # the server's stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_xvfb() -> tuple[subprocess.Popen[bytes], str]:
    """Xvfb on a display number it picks itself (-displayfd), so parallel sessions never collide."""
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write_fd), "-screen", "0", f"{SCREEN[0]}x{SCREEN[1]}x24", "-nolisten", "tcp",
         "-noreset"],
        pass_fds=(write_fd,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as r:
        number = r.readline().strip().decode()
    if not number.isdigit():
        proc.kill()
        proc.wait()
        pytest.fail("Xvfb did not report a display number")
    return proc, f":{number}"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def desktop_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DesktopSession]:
    """forge's desktop server on a private Xvfb display (see the module docstring)."""
    requires("desktop-host")
    home = tmp_path_factory.mktemp("desktop-home")
    (home / "Desktop").mkdir()
    log = home.parent / "desktop-server.log"
    xvfb, display = _start_xvfb()
    port = _free_port()
    env = {**os.environ, "DISPLAY": display, "HOME": str(home), "SCREEN_WIDTH": str(SCREEN[0]),
           "SCREEN_HEIGHT": str(SCREEN[1])}
    with open(log, "wb") as sink:
        server = subprocess.Popen([sys.executable, str(SERVER_DIR / "server.py"), "--port", str(port)],
                                  env=env, cwd=home, stdout=sink, stderr=sink)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                if httpx.get(f"{url}/platform", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the desktop server did not come up:\n{log.read_text(errors='replace')}")
            time.sleep(0.05)
        yield DesktopSession(url, display, home, log)
    finally:
        _stop(server)
        _stop(xvfb)


@pytest.fixture(scope="session")
def desktop_server(desktop_session: DesktopSession) -> str:
    """The base URL of forge's desktop server on a private Xvfb display, e.g. "http://127.0.0.1:41234"."""
    return desktop_session.url
