"""Runs the addon's hook checks (mitmproxy.test.tflow) inside mitmproxy's own virtual environment."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from forge_cli.paths import env_python

HERE = Path(__file__).resolve().parent


@pytest.mark.mitm
def test_addon_hooks_with_tflow() -> None:
    python = env_python("mitmproxy")
    if not python.exists():
        pytest.fail(f"{python} missing: run scripts/setup.sh mitmproxy")
    proc = subprocess.run([str(python), str(HERE / "mitm_addon_checks.py")], capture_output=True, text=True,
                          timeout=300, cwd=HERE.parents[1])
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]
    assert "OK" in proc.stderr
