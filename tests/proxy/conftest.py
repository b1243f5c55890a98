"""Fixtures for the capture proxy tests: a fake vLLM-like upstream and a real mitmdump running forge's addon."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forge_cli.proxy.launcher import ProxyHandle, free_port, start_proxy
from tests.requires import requires

HERE = Path(__file__).resolve().parent


def _wait_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


class FakeUpstream:
    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, str(HERE / "fake_upstream.py"), str(self.port)])
        _wait_port(self.port)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="session")
def fake_upstream() -> Iterator[FakeUpstream]:
    up = FakeUpstream()
    up.start()
    yield up
    up.stop()


def need_mitmdump() -> None:
    """mitmdump from forge's mitmproxy environment (the part mitmproxy of tests/requires.py)."""
    requires("mitmproxy")


@pytest.fixture(scope="session")
def proxy(fake_upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyHandle]:
    need_mitmdump()
    store = tmp_path_factory.mktemp("proxy") / "traces.sqlite"
    handle = start_proxy(fake_upstream.url, store=store, max_body_mb=1, upstream_timeout_s=2, max_header_kb=16)
    yield handle
    handle.stop()


@pytest.fixture
def rollout(proxy: ProxyHandle) -> dict[str, Any]:
    return proxy.register(task="unit", harness="test")
