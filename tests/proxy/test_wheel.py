"""forge installed as a wheel (``pip install .``, not editable) into a fresh environment: ``forge proxy`` starts
and records, and the mitmproxy child's import path holds forge's proxy-side packages and nothing else of the
parent environment (installed as a wheel, the package's parent directory is the whole site-packages, whose
h11 would shadow mitmproxy's pinned one).

~45 s here: most of it is installing forge's runtime dependencies into the fresh environment.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from forge_cli.paths import env_dir
from forge_cli.proxy.launcher import free_port
from tests.proxy.conftest import FakeUpstream, need_mitmdump

REPO = Path(__file__).resolve().parents[2]

# run inside mitmproxy's python with the child's environment and working directory: its import path, where
# forge's modules come from, and that the rest of forge and of forge's environment cannot be imported
CHILD_PROBE = """
import importlib.util, json, sys
import forge_cli.remote.mitmproxy.main, forge_cli.remote.mitmproxy.writer, h11
print(json.dumps({
    "path": [p for p in sys.path],
    "forge": sorted({m.__file__ for n, m in sys.modules.items() if n.split(".")[0] == "forge_cli"}),
    "h11": h11.__file__,
    "prefixes": [sys.prefix, sys.base_prefix],
    "missing": [n for n in ("forge_cli.errors", "forge_cli.cli", "forge_cli.config", "typer", "pydantic")
                if importlib.util.find_spec(n) is None],
}))
"""


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def _run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kwargs)  # type: ignore[call-overload]
    assert proc.returncode == 0, f"{cmd}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.mark.mitm
def test_wheel_install_proxy_starts_records_and_child_sees_only_proxy_packages(
        fake_upstream: FakeUpstream, tmp_path: Path) -> None:
    need_mitmdump()
    started = time.monotonic()
    # the wheel, installed (not editable) with its dependencies into a fresh venv with no system site-packages
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(REPO)])
    wheel = next((tmp_path / "dist").glob("forge_rl-*.whl"))
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q", "--no-compile",
          str(wheel)])
    site = Path(_run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                     cwd=tmp_path).stdout.strip())
    assert (site / "h11").is_dir() and (site / "forge_cli" / "remote" / "mitmproxy" / "main.py").is_file()

    # FORGE_HOME of its own (the import-path cache lands there), sharing the mitmproxy environment setup.sh built
    home = tmp_path / "home"
    (home / "envs").mkdir(parents=True)
    (home / "envs" / "mitmproxy").symlink_to(env_dir("mitmproxy"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(FORGE_HOME=str(home), PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    store = tmp_path / "traces.sqlite"
    port = free_port()
    proc = subprocess.Popen([str(venv / "bin" / "forge"), "proxy", "--upstream", fake_upstream.url, "--port",
                             str(port), "--store", str(store)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=tmp_path, env=env)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert f"listening at http://127.0.0.1:{port}" in first, first + (proc.stderr.read() if proc.stderr else "")
        token = Path(proc.stdout.readline().split("admin token:")[1].strip()).read_text().strip()
        admin = {"authorization": f"Bearer {token}"}
        reg = httpx.post(f"http://127.0.0.1:{port}/forge/v1/rollouts", json={"rollout_id": "wheel-1"}, headers=admin)
        assert reg.status_code == 201, reg.text
        ok = httpx.post(f"http://127.0.0.1:{port}/r/wheel-1/v1/chat/completions", timeout=20,
                        headers={"authorization": f"Bearer {reg.json()['key']}"},
                        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        assert ok.status_code == 200, ok.text
        calls = httpx.get(f"http://127.0.0.1:{port}/forge/v1/rollouts/wheel-1/calls", headers=admin, timeout=20)
        assert len(calls.json()["calls"]) == 1, calls.text

        # the mitmproxy child (forge's only child) and its store writer: forge's proxy-side packages only
        [child] = _children(proc.pid)
        child_env, child_cwd = _environ(child), os.readlink(f"/proc/{child}/cwd")
        [writer] = _children(child)
        root = child_env["PYTHONPATH"]
        assert root == child_cwd == _environ(writer)["PYTHONPATH"] == os.readlink(f"/proc/{writer}/cwd")
        assert Path(root).is_relative_to(home)
        assert sorted(p.name for p in (Path(root) / "forge_cli").iterdir() if p.name != "__pycache__") == [
            "__init__.py", "plugins.py", "proxy", "remote", "traces"]  # plugins.py: the registry the wire formats use
        # remote/: the proxy's own entry points (mitmproxy/), none of the other places' (verl/, osworld/, sandbox/)
        assert sorted(p.name for p in (Path(root) / "forge_cli" / "remote").iterdir() if p.name != "__pycache__") == [
            "__init__.py", "mitmproxy"]
        mitm_python = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")[0].decode()
        probe = json.loads(_run([mitm_python, "-c", CHILD_PROBE], cwd=child_cwd, env=child_env).stdout)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(120)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    # every entry is the import root or mitmproxy's own environment (its venv and its base interpreter's stdlib)
    path = [p or child_cwd for p in probe["path"]]
    assert path[0] == root, path
    assert all(p == root or p.startswith(tuple(probe["prefixes"])) for p in path), (path, probe["prefixes"])
    assert not [p for p in path if site.resolve() in Path(p).resolve().parents or Path(p).resolve() == REPO], path
    assert all(f.startswith(root + "/forge_cli/") for f in probe["forge"]), probe["forge"]
    assert probe["h11"].startswith(probe["prefixes"][0]), probe["h11"]
    assert probe["missing"] == ["forge_cli.errors", "forge_cli.cli", "forge_cli.config", "typer", "pydantic"]
    with sqlite3.connect(store) as db:
        assert db.execute("select count(*) from calls").fetchone()[0] == 1
    assert time.monotonic() - started < 180
