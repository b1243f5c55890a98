"""The proxy process entry point (``forge_cli.remote.mitmproxy.main``): lean addon set, clear option errors, no
reloads."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx

from forge_cli.proxy.launcher import ProxyHandle, free_port, mitmdump_path
from tests.helpers import REPO
from tests.proxy.conftest import FakeUpstream, need_mitmdump


def _run_main(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    need_mitmdump()
    return subprocess.run([str(mitmdump_path().with_name("python")), "-m", "forge_cli.remote.mitmproxy.main", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def test_unknown_option_is_one_clear_error(fake_upstream: FakeUpstream) -> None:
    done = _run_main("--mode", f"reverse:{fake_upstream.url}@127.0.0.1:{free_port()}", "--set", "no_such_option=1")
    assert done.returncode == 2
    assert "forge proxy:" in done.stderr and "no_such_option" in done.stderr
    assert "Traceback" not in done.stderr


def test_missing_forge_settings_exit_non_zero(fake_upstream: FakeUpstream) -> None:
    done = _run_main("--mode", f"reverse:{fake_upstream.url}@127.0.0.1:{free_port()}", "--set", "forge_store=")
    assert done.returncode != 0
    assert "forge_" in done.stderr and "Traceback" not in done.stderr


def test_loads_only_the_core_addons_and_forge(proxy: ProxyHandle) -> None:
    """The running proxy is forge's entry point, not mitmdump with its ~35 default addons and script loader."""
    cmdline = Path(f"/proc/{proxy.process.pid}/cmdline").read_bytes().split(b"\0")
    assert b"forge_cli.remote.mitmproxy.main" in cmdline and b"-s" not in cmdline
    assert httpx.get(proxy.url + "/forge/v1/health", timeout=5).status_code == 200
