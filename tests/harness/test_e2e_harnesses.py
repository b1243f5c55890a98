"""End to end with the real harness binaries: each of OpenClaw, Codex, Claude Code, pi, opencode, Qwen Code and
mini-swe-agent runs one builtin task in a docker sandbox (forge-base:bookworm, its bundle mounted read-only)
against the real vLLM server on the default model, through forge's capture proxy, via `forge rollout`.

All of it happens in ONE batch of concurrent `forge rollout` processes (the module fixture ``batch``): one run per
harness, pi's with two samples, so 8 rollouts of mixed harnesses are in flight together against one vLLM server
(2 of them through the same proxy). The per-harness tests check their own run: the harness ran to an end (``ok``
or ``agent_error``: a 135M model is not expected to solve the task), at least one call was recorded for that
rollout with prompt and completion token ids in the harness's wire format, and nothing for any other rollout.
``test_concurrent_mixed_harnesses_keep_their_records`` checks attribution across the whole batch.

Bundles: the tests use the machine's real ``$FORGE_HOME/harnesses`` (``scripts/setup.sh harnesses``) and install
the missing ones there once (``forge harness install``, minutes from the npm registry and PyPI, then cached).
Time on 2 loaded cores: see ``DURATIONS`` printed by the batch (``pytest -s``); each harness is kept tiny
(1 task, 1 sample, ``model.max_output_tokens=64``, harness time limit ``HARNESS_TIMEOUT_S``).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from forge_cli.paths import forge_home
from tests.conftest import SERVED_CONTEXT
from tests.helpers import REPO

pytestmark = [pytest.mark.vllm, pytest.mark.docker, pytest.mark.mitm]

# harness -> the wire format the proxy must record its calls in
WIRE = {"openclaw": "chat", "codex": "responses", "claude-code": "anthropic", "pi": "chat", "opencode": "chat",
        "qwen-code": "chat", "mini-swe-agent": "chat"}
# samples per harness in the batch: 8 rollouts in all, two of them (pi) through one proxy
SAMPLES = {name: 2 if name == "pi" else 1 for name in WIRE}
IMAGE = "forge-base:bookworm"
HARNESS_TIMEOUT_S = 900
PATH_OF = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "anthropic": "/v1/messages"}


@dataclass
class Run:
    harness: str
    returncode: int
    stderr: str
    seconds: float
    summary: dict[str, Any]
    results: list[dict[str, Any]]
    # (rollout_id, seq, wire_format, path, status, prompt ids, completion ids, request) of every recorded call
    calls: list[tuple[Any, ...]]
    registered: list[str]


def _docker() -> None:
    """A running dockerd and the base image, started/built here when missing (as tests/runtime does)."""
    if shutil.which("dockerd") is None or shutil.which("docker") is None:
        pytest.skip("docker.io is not installed: scripts/setup.sh docker installs it")
    if subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode != 0:
        subprocess.run([str(REPO / "scripts" / "dockerd.sh")], check=True, timeout=120)
    subprocess.run([str(REPO / "scripts" / "base-image.sh")], check=True, timeout=900)


def _bundles() -> Path:
    """The machine's harness bundles, installing the missing ones once (what scripts/setup.sh harnesses does)."""
    root = forge_home() / "harnesses"
    missing = [h for h in WIRE if not (root / h / "forge-bundle.json").is_file()]
    if missing:
        done = subprocess.run([sys.executable, "-m", "forge_cli", "harness", "install", *missing], cwd=REPO,
                              capture_output=True, text=True, timeout=1800, check=False)
        assert done.returncode == 0, f"forge harness install {' '.join(missing)} failed:\n{done.stderr[-3000:]}"
    return root


def _rollout(harness: str, home: Path, out: Path, upstream: str) -> Run:
    args = [sys.executable, "-m", "forge_cli", "rollout", "--json", f"+harness={harness}", "runtime=docker",
            f"proxy.upstream={upstream}", "proxy.port=0", "rollout.max_tasks=1",
            f"rollout.samples_per_task={SAMPLES[harness]}", f"rollout.concurrency={SAMPLES[harness]}",
            "model.max_output_tokens=64", f"model.max_model_len={SERVED_CONTEXT}",
            f"harness.timeout_s={HARNESS_TIMEOUT_S}", f"run.output_dir={out}", f"run.name=e2e-{harness}"]
    started = time.monotonic()
    done = subprocess.run(args, capture_output=True, text=True, cwd=REPO, timeout=HARNESS_TIMEOUT_S + 600,
                          env={**os.environ, "COLUMNS": "200", "FORGE_HOME": str(home)}, check=False)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        return Run(harness, done.returncode, done.stderr, seconds, {}, [], [], [])
    summary = json.loads(done.stdout)
    run_dir = Path(summary["run_dir"])
    results = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    with sqlite3.connect(run_dir / "traces.sqlite") as db:
        calls = db.execute("SELECT rollout_id, seq, wire_format, path, status, prompt_token_ids, "
                           "completion_token_ids, request FROM calls ORDER BY rollout_id, seq").fetchall()
        registered = [row[0] for row in db.execute("SELECT rollout_id FROM rollouts")]
    return Run(harness, 0, done.stderr, seconds, summary, results, calls, registered)


@pytest.fixture(scope="module")
def batch(policy_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Run]]:
    """Every harness's run, all started at once: 8 concurrent rollouts of mixed harnesses."""
    _docker()
    bundles = _bundles()
    home = tmp_path_factory.mktemp("forge-home")
    for shared in ("envs", "models"):
        (home / shared).symlink_to(forge_home() / shared)
    (home / "harnesses").symlink_to(bundles)
    out = tmp_path_factory.mktemp("runs")
    started = time.monotonic()
    with ThreadPoolExecutor(len(WIRE)) as pool:
        runs = dict(zip(WIRE, pool.map(lambda h: _rollout(h, home, out, policy_server.url), WIRE), strict=True))
    print(f"\n[e2e harnesses] batch of {sum(SAMPLES.values())} rollouts took {time.monotonic() - started:.0f}s")
    for name, run in runs.items():
        durations = [r["durations"] for r in run.results]
        print(f"[e2e harnesses] {name:15s} {run.seconds:6.0f}s  status {run.summary.get('status')}  "
              f"calls {[r['calls'] for r in run.results]}  harness s {[d.get('harness') for d in durations]}")
    yield runs


@pytest.mark.parametrize("harness", list(WIRE))
def test_real_harness_runs_to_an_end_through_the_proxy(batch: dict[str, Run], harness: str) -> None:
    run = batch[harness]
    assert run.returncode == 0, f"forge rollout +harness={harness} failed:\n{run.stderr[-3000:]}"
    assert len(run.results) == SAMPLES[harness] == run.summary["rollouts"]
    for result in run.results:
        logs = Path(result["logs"])
        output = "".join((logs / f"harness.{s}").read_text(errors="replace")[-1500:] for s in ("stdout", "stderr")
                         if (logs / f"harness.{s}").exists())
        assert result["status"] in ("ok", "agent_error"), f"{harness}: {result['status']}: {result['error']}\n{output}"
        assert result["exit_code"] is not None, "the harness process ended by itself"
        mine = [c for c in run.calls if c[0] == result["rollout_id"]]
        assert mine, f"{harness} made no call through the proxy:\n{output}"
        assert len(mine) == result["calls"]
        assert [c[1] for c in mine] == list(range(len(mine)))
        with_ids = [c for c in mine if c[4] == "ok"]
        assert with_ids, f"{harness}: no call completed: {[(c[3], c[4]) for c in mine]}"
        for _, _, wire, path, _, prompt_ids, completion_ids, request in with_ids:
            assert wire == WIRE[harness] and path.split("?")[0] == PATH_OF[wire]
            assert json.loads(prompt_ids), "prompt token ids from vLLM"
            assert json.loads(completion_ids), "completion token ids from vLLM"
            assert json.loads(request), "the harness's own request body"
    # nothing recorded for any other rollout of this run (or under an id the run never registered)
    ids = {r["rollout_id"] for r in run.results}
    assert {c[0] for c in run.calls} == ids and set(run.registered) == ids


def test_concurrent_mixed_harnesses_keep_their_records(batch: dict[str, Run]) -> None:
    """8 rollouts of 7 harnesses in flight together: every record stays with its own rollout."""
    assert sum(len(run.results) for run in batch.values()) == 8
    seen: dict[str, str] = {}
    for name, run in batch.items():
        assert run.returncode == 0, f"{name}: {run.stderr[-2000:]}"
        for result in run.results:
            assert result["harness"] == name
            assert result["rollout_id"] not in seen, f"{name} and {seen.get(result['rollout_id'])} share a rollout id"
            seen[result["rollout_id"]] = name
        for rollout_id, _, wire, *_ in run.calls:
            assert seen.get(rollout_id) == name and wire == WIRE[name], f"{name}'s store holds a call of {rollout_id}"
    # the calls a rollout's result counts are the ones in the store, and each rollout spoke its own wire format
    for run in batch.values():
        for result in run.results:
            assert result["calls"] == sum(1 for c in run.calls if c[0] == result["rollout_id"]) >= 1
    # the two pi rollouts shared one proxy and one store: each kept its own calls
    pi = batch["pi"]
    assert len({c[0] for c in pi.calls}) == 2
