"""`forge train` when the policy server dies mid-step: a clear message, exit 1, a resumable run, nothing left running.

forge train starts its own vLLM server here (the session fixture's server must survive); the test kills that server
with SIGKILL once the first step's rollouts are under way.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import REPO

pytestmark = [pytest.mark.vllm, pytest.mark.mitm, pytest.mark.docker]

TASKS = "env.task_ids=[create-edit-touch-guided-0]"


def _children(pid: int) -> list[tuple[int, str]]:
    out = subprocess.run(["ps", "-eo", "pid=,ppid=,args="], capture_output=True, text=True).stdout
    procs = [line.split(None, 2) for line in out.splitlines() if line.strip()]
    tree, found = {pid}, []
    changed = True
    while changed:
        changed = False
        for p, ppid, *args in procs:
            if int(ppid) in tree and int(p) not in tree:
                tree.add(int(p))
                found.append((int(p), args[0] if args else ""))
                changed = True
    return found


def test_policy_server_dying_mid_step_stops_the_run_cleanly(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    args = [sys.executable, "-m", "forge_cli", "train", TASKS, "runtime=docker", "algo.group_size=2",
            "trainer.tasks_per_step=1", "trainer.steps=2", "model.dtype=float32", "proxy.port=0",
            f"run.output_dir={runs}"]
    log = tmp_path / "train.log"
    with log.open("w") as out:
        train = subprocess.Popen(args, cwd=REPO, env={**os.environ, "COLUMNS": "200"}, stdout=out,
                                 stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline and train.poll() is None:
                if any(runs.glob("*/rollouts/*")):  # the first step's rollouts are under way
                    break
                time.sleep(1)
            assert train.poll() is None, log.read_text()[-3000:]
            servers = [pid for pid, cmd in _children(train.pid) if "vllm.entrypoints" in cmd]
            assert servers, "forge train started its own policy server"
            for pid in servers:
                os.kill(pid, signal.SIGKILL)
            code = train.wait(600)
        finally:
            if train.poll() is None:
                train.kill()
    text = log.read_text()
    assert code == 1, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    run_dir = next(runs.iterdir())
    assert "policy server" in text and f"forge train --resume {run_dir}" in text, text[-2000:]
    assert not (run_dir / "metrics.jsonl").is_file() or not (run_dir / "metrics.jsonl").read_text().strip(), \
        "nothing of the failed step was trained or logged"
    time.sleep(2)
    left = subprocess.run(["pgrep", "-f", str(run_dir)], capture_output=True, text=True).stdout.split()
    assert not left, "nothing forge started for the run outlives it (proxy, tool server)"
    containers = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=forge.run={run_dir.name}"],
                                capture_output=True, text=True)
    assert not containers.stdout.strip(), "no sandbox left behind"
