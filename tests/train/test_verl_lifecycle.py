"""The rollout session of ``ForgeHarnessAgentLoop`` lives exactly as long as its veRL worker process.

A veRL agent-loop worker is a long-lived process that runs the loop's ``run`` on its event loop; forge starts one
rollout session per worker (capture proxy, tool server, services) on first use. ``WORKER`` runs in veRL's
environment as such a process: it has the loop acquire its replica from a server manager (forge's real CPU vLLM as
the replica) and start its session, reports its descendant processes, then either returns (the interpreter exits
normally) or is killed with SIGKILL. Either way no process it started may outlive it.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from forge_cli.config.compose import compose
from forge_cli.paths import env_python
from forge_cli.serve.server import PolicyServer

REPO = Path(__file__).resolve().parents[2]

WORKER = r'''
import asyncio, json, os, signal, sys
sys.path.insert(0, sys.argv[5])
import psutil
from forge_cli.remote.verl import agent_loop
config, rollouts, upstream, mode = sys.argv[1:5]


class ServerManager:  # the two calls the loop makes on veRL's AsyncLLMServerManager
    async def _acquire_server(self, request_id):
        return upstream, None

    def _release_server(self, server_id, request_id=None):
        pass


loop = object.__new__(agent_loop.ForgeHarnessAgentLoop)
loop.server_manager, loop.forge_config, loop.forge_rollouts_dir = ServerManager(), config, rollouts
first = asyncio.run(loop._runtime())
again = asyncio.run(loop._runtime())  # a second rollout of the same worker: the same session
children = [p.pid for p in psutil.Process().children(recursive=True)]
print(json.dumps({"pid": os.getpid(), "children": children, "one_session": first is again,
                  "run_dir": str(first.session.run_dir), "served": first.exp.model.served_name}), flush=True)
if mode == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
'''


def _alive(pids: list[int]) -> list[int]:
    """The pids still running (a zombie has ended)."""
    out = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            out.append(pid)
    return out


@pytest.mark.requires("verl", "mitmproxy")
@pytest.mark.parametrize("mode", ["exit", "kill"])
def test_worker_leaves_no_process_behind(tmp_path: Path, policy_server: PolicyServer, mode: str) -> None:
    exp = compose(["trainer=verl", "trainer.n_gpus_per_node=1", f"run.output_dir={tmp_path}"]).experiment
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(exp.model_dump(mode="json"), sort_keys=False))
    (tmp_path / "worker.py").write_text(WORKER)
    argv = [str(env_python("verl")), str(tmp_path / "worker.py"), str(config), str(tmp_path / "rollouts"),
            policy_server.url, mode, str(REPO)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == (-9 if mode == "kill" else 0), done.stderr[-3000:]
    got: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["one_session"] and got["children"], got  # the session started its processes (proxy at least)
    assert got["served"] == policy_server.model
    deadline = time.monotonic() + 30
    while _alive(got["children"]) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _alive(got["children"]) == [], f"outlived the worker ({mode}): {got['children']}"
    if mode == "exit":  # closed, not just killed: the run directory's results log was flushed and closed
        assert (Path(got["run_dir"]) / "results.jsonl").exists()
