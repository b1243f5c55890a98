"""The desktop container's lifeline (server/lifeline.py) and entrypoint (server/start.sh), run without the image.

lifeline.py needs nothing but python. start.sh is run on this host too when the programs it starts are installed
(`apt-get install -y xvfb dbus-x11 at-spi2-core openbox socat curl`), with its relay directory, logs, HOME and
server port moved into a temporary directory and a free X display, so it never touches the host's own.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.requires import requires

SERVER_DIR = Path(__file__).resolve().parents[2] / "forge_cli" / "desktop" / "image" / "server"
LIFELINE = SERVER_DIR / "lifeline.py"
START = SERVER_DIR / "start.sh"


def _lifeline(tmp_path: Path, connect_s: str) -> tuple[subprocess.Popen[bytes], Path, Path]:
    sock, ready = tmp_path / "lifeline.sock", tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, str(LIFELINE), "--ready", str(ready), str(sock)],
                            env={**os.environ, "FORGE_DESKTOP_CONNECT_S": connect_s},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return proc, sock, ready


def _wait_for(path: Path, proc: subprocess.Popen[bytes], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def test_lifeline_exits_when_the_client_closes(tmp_path: Path) -> None:
    proc, sock, ready = _lifeline(tmp_path, "10")
    try:
        _wait_for(ready, proc)
        assert sock.exists() and oct(sock.stat().st_mode & 0o777) == "0o666"
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(str(sock))
        client.sendall(b"anything forge sends is ignored\n")
        time.sleep(0.3)
        assert proc.poll() is None, "the lifeline must hold while the connection is open"
        client.close()
        assert proc.wait(timeout=5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not ready.exists() and not sock.exists()


def test_lifeline_exits_when_the_client_is_killed(tmp_path: Path) -> None:
    """forge dying by SIGKILL: the kernel closes its end, and the lifeline ends."""
    proc, sock, ready = _lifeline(tmp_path, "10")
    holder = None
    try:
        _wait_for(ready, proc)
        holder = subprocess.Popen([sys.executable, "-c", (
            "import socket, sys, time\n"
            "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
            f"s.connect({str(sock)!r})\n"
            "print('connected', flush=True)\n"
            "time.sleep(60)\n")], stdout=subprocess.PIPE)
        assert holder.stdout is not None and holder.stdout.readline() == b"connected\n"
        time.sleep(0.2)
        assert proc.poll() is None
        holder.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=5) == 0
    finally:
        for p in (proc, holder):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def test_lifeline_exits_when_nobody_connects_in_time(tmp_path: Path) -> None:
    proc, _sock, ready = _lifeline(tmp_path, "0.5")
    start = time.monotonic()
    _out, err = proc.communicate(timeout=10)
    assert proc.returncode == 3
    assert time.monotonic() - start < 5
    assert b"nobody connected" in err
    assert not ready.exists()


def test_start_sh_is_posix_sh() -> None:
    assert START.read_text().startswith("#!/bin/sh\n")
    subprocess.run(["sh", "-n", str(START)], check=True)
    if shutil.which("dash"):
        subprocess.run(["dash", "-n", str(START)], check=True)


def _free_display() -> str:
    for n in range(140, 400):
        if not Path(f"/tmp/.X11-unix/X{n}").exists() and not Path(f"/tmp/.X{n}-lock").exists():
            return f":{n}"
    pytest.fail("no free X display number in :140-:399")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_start_sh_brings_the_desktop_up_and_ends_with_the_lifeline(tmp_path: Path) -> None:
    requires("desktop-host")
    relay, home = tmp_path / "relay", tmp_path / "home"
    home.mkdir()
    port = _free_port()
    env = {**os.environ, "DISPLAY": _free_display(), "HOME": str(home), "SCREEN_WIDTH": "1024",
           "SCREEN_HEIGHT": "768", "FORGE_DESKTOP_RELAY": str(relay), "FORGE_DESKTOP_LOGS": str(tmp_path / "logs"),
           "FORGE_DESKTOP_PORT": str(port), "FORGE_DESKTOP_PYTHON": sys.executable, "FORGE_DESKTOP_CONNECT_S": "20"}
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)
    proc = subprocess.Popen(["sh", str(START)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        _wait_for(relay / "ready", proc, timeout=30)
        transport = httpx.HTTPTransport(uds=str(relay / f"{port}.sock"))
        with httpx.Client(transport=transport, base_url="http://desktop", timeout=10) as client:
            assert client.get("/platform").text == "Linux"
            assert client.post("/screen_size").json() == {"width": 1024, "height": 768}
            res = client.post("/execute", json={"command": "echo $DBUS_SESSION_BUS_ADDRESS", "shell": True})
            assert res.json()["output"].startswith("unix:"), "commands run on the desktop's dbus session"
        lifeline = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        lifeline.connect(str(relay / "lifeline.sock"))
        time.sleep(0.3)
        assert proc.poll() is None
        lifeline.close()
        assert proc.wait(timeout=10) == 0
        assert not (relay / "ready").exists()
    finally:
        # outside a container nothing ends start.sh's helpers for us: end its whole session
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
