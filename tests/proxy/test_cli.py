"""``forge proxy`` and ``forge traces ls | show | export`` as a user runs them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest

from forge_cli.proxy.launcher import ProxyHandle, free_port
from forge_cli.traces.export import arrow_schema
from tests.proxy.conftest import FakeUpstream, need_mitmdump

FORGE = [sys.executable, "-m", "forge_cli"]


def _forge(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*FORGE, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.mitm
def test_forge_proxy_serves_records_and_stops_cleanly(fake_upstream: FakeUpstream, tmp_path: Path) -> None:
    need_mitmdump()
    store = tmp_path / "cli.sqlite"
    port = free_port()
    proc = subprocess.Popen([*FORGE, "proxy", "--upstream", fake_upstream.url, "--port", str(port), "--store",
                             str(store)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert f"listening at http://127.0.0.1:{port}" in first, first + (proc.stderr.read() if proc.stderr else "")
        token_line = proc.stdout.readline()
        token = Path(token_line.split("admin token:")[1].strip()).read_text().strip()
        assert (Path(token_line.split("admin token:")[1].strip()).stat().st_mode & 0o777) == 0o600
        admin = {"authorization": f"Bearer {token}"}
        reg = httpx.post(f"http://127.0.0.1:{port}/forge/v1/rollouts", json={"rollout_id": "cli-1"}, headers=admin)
        assert reg.status_code == 201
        key = reg.json()["key"]
        ok = httpx.post(f"http://127.0.0.1:{port}/r/cli-1/v1/chat/completions",
                        headers={"authorization": f"Bearer {key}"}, timeout=20,
                        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        assert ok.status_code == 200
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(120)  # generous: stopping waits for the writer, slow on a loaded 2-core machine
    assert proc.returncode == 0
    listing = _forge("traces", "ls", "--store", str(store), "--json")
    assert json.loads(listing.stdout)[0]["calls"] == 1
    assert key not in store.read_bytes().decode("latin-1")  # keys are never stored


@pytest.mark.mitm
def test_traces_show_and_export(proxy: ProxyHandle, rollout: dict[str, Any], tmp_path: Path) -> None:
    headers = {"authorization": f"Bearer {rollout['key']}"}
    for stream in (False, True):
        httpx.post(rollout["base_url"] + "/v1/chat/completions", headers=headers, timeout=20,
                   json={"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
    proxy.finish(rollout["rollout_id"])
    shown = _forge("traces", "show", rollout["rollout_id"], "--store", str(proxy.store))
    assert shown.returncode == 0 and shown.stdout.count(" ok ") == 2, shown.stdout + shown.stderr
    assert "completion=4" in shown.stdout
    out = tmp_path / "calls.jsonl"
    exported = _forge("traces", "export", str(out), "--store", str(proxy.store), "--rollout", rollout["rollout_id"])
    assert exported.returncode == 0, exported.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["seq"] for r in rows] == [0, 1] and rows[1]["response"]["choices"][0]["message"]["content"]
    pq_out = tmp_path / "calls.parquet"
    assert _forge("traces", "export", str(pq_out), "-f", "parquet", "--store", str(proxy.store)).returncode == 0
    table = pq.read_table(pq_out)
    assert table.schema == arrow_schema() and table.num_rows >= 2


def test_traces_errors_are_one_clear_message(tmp_path: Path) -> None:
    missing = _forge("traces", "ls", "--store", str(tmp_path / "nope.sqlite"))
    assert missing.returncode == 2 and "no trace store" in missing.stderr and "Traceback" not in missing.stderr
    bad = _forge("traces", "export", str(tmp_path / "x"), "-f", "csv", "--store", str(tmp_path / "nope.sqlite"))
    assert bad.returncode == 2 and "unknown export format" in bad.stderr
    no_mitm = subprocess.run([*FORGE, "proxy", "--upstream", "http://127.0.0.1:1"], capture_output=True, text=True,
                             timeout=60, env={**os.environ, "FORGE_HOME": str(tmp_path)})
    assert no_mitm.returncode == 1 and "scripts/setup.sh mitmproxy" in no_mitm.stderr
