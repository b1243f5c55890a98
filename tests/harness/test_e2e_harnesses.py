"""End to end with the real harness binaries: each of OpenClaw, Codex, Claude Code, pi, opencode, Qwen Code, Gemini
CLI and mini-swe-agent runs one builtin task in a docker sandbox (forge-base:bookworm, its bundle mounted read-only)
against the real vLLM server on the default model, through forge's capture proxy, via `forge rollout`.

Per harness (one run each, in turn): the harness ran to an end (``ok`` or ``agent_error``: a 135M model is not
expected to solve the task), at least one call was recorded for that rollout with prompt and completion token
ids in the harness's wire format, and nothing for any other rollout. Then 8 rollouts of mixed harnesses run
at once (one `forge rollout` per harness, started together, two samples each so that two rollouts also share
one proxy): every record stays with its own rollout. The concurrent mix uses the harnesses whose first prompt
is small (pi, Claude Code --bare, mini-swe-agent) plus Codex (Responses API, ~5,700 tokens, prefix-cached
by then): all three wire formats, without 8 long prefills on 2 CPU cores.

Bundles: the tests use the machine's real ``$FORGE_HOME/harnesses`` (``scripts/setup.sh harnesses``) and install
the missing ones there once (``forge harness install``, minutes from the npm registry and PyPI, then cached).
Each run is kept tiny (1 task, ``model.max_output_tokens=64``, harness time limit ``HARNESS_TIMEOUT_S``);
``pytest -s`` prints the time each takes. Measured here (2 loaded cores, float32 vLLM): pi 14 s, Claude Code
37 s, Codex 21 s, opencode 71 s per run; Gemini CLI 177 s (its first prompt is ~11,000 tokens).
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from forge_cli.paths import forge_home
from tests.conftest import LONG_CONTEXT
from tests.helpers import REPO
from tests.requires import requires

pytestmark = [pytest.mark.e2e, pytest.mark.vllm, pytest.mark.docker, pytest.mark.mitm]

# harness -> the wire format the proxy must record its calls in
WIRE = {"openclaw": "chat", "codex": "responses", "claude-code": "anthropic", "pi": "chat", "opencode": "chat",
        "qwen-code": "chat", "gemini-cli": "gemini", "mini-swe-agent": "chat"}
# the concurrent mix: harness -> samples (8 rollouts, every wire format, two per proxy)
CONCURRENT = {"pi": 2, "claude-code": 2, "mini-swe-agent": 2, "codex": 2}
IMAGE = "forge-base:bookworm"
HARNESS_TIMEOUT_S = 600
# harnesses whose own first prompt is long (Qwen Code ~17,000 tokens): its prefill on 2 CPU cores took 536 s under
# load here, before the harness could go on
LONG_PROMPT_TIMEOUT_S = {"qwen-code": 1500}


def harness_timeout(harness: str) -> int:
    """The harness time limit for one e2e rollout."""
    return LONG_PROMPT_TIMEOUT_S.get(harness, HARNESS_TIMEOUT_S)
PATH_OF = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "anthropic": "/v1/messages",
           "gemini": "/v1beta/models/policy:streamGenerateContent"}


@dataclass
class Run:
    harness: str
    returncode: int
    stderr: str
    seconds: float
    summary: dict[str, Any]
    results: list[dict[str, Any]]
    # (rollout_id, seq, wire_format, path, status, prompt ids, completion ids, request, logprobs) of every call
    calls: list[tuple[Any, ...]]
    registered: list[str]


def _bundles() -> Path:
    """The machine's harness bundles, installing the missing ones once (what scripts/setup.sh harnesses does)."""
    root = forge_home() / "harnesses"
    missing = [h for h in WIRE if not (root / h / "forge-bundle.json").is_file()]
    if missing:
        done = subprocess.run([sys.executable, "-m", "forge_cli", "harness", "install", *missing], cwd=REPO,
                              capture_output=True, text=True, timeout=1800, check=False)
        assert done.returncode == 0, f"forge harness install {' '.join(missing)} failed:\n{done.stderr[-3000:]}"
    return root


def _rollout(harness: str, home: Path, out: Path, upstream: str, samples: int = 1, runtime: str = "docker",
             context: int = LONG_CONTEXT) -> Run:
    args = [sys.executable, "-m", "forge_cli", "rollout", "--json", f"+harness={harness}", f"runtime={runtime}",
            f"proxy.upstream={upstream}", "proxy.port=0", "rollout.max_tasks=1",
            f"rollout.samples_per_task={samples}", f"rollout.concurrency={samples}",
            "model.max_output_tokens=64", f"model.max_model_len={context}",
            f"harness.timeout_s={harness_timeout(harness)}", f"run.output_dir={out}", f"run.name=e2e-{harness}"]
    started = time.monotonic()
    done = subprocess.run(args, capture_output=True, text=True, cwd=REPO, timeout=harness_timeout(harness) + 600,
                          env={**os.environ, "COLUMNS": "200", "FORGE_HOME": str(home)}, check=False)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        return Run(harness, done.returncode, done.stderr, seconds, {}, [], [], [])
    summary = json.loads(done.stdout)
    run_dir = Path(summary["run_dir"])
    results = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    with sqlite3.connect(run_dir / "traces.sqlite") as db:
        calls = db.execute("SELECT rollout_id, seq, wire_format, path, status, prompt_token_ids, "
                           "completion_token_ids, request, completion_logprobs FROM calls "
                           "ORDER BY rollout_id, seq").fetchall()
        registered = [row[0] for row in db.execute("SELECT rollout_id FROM rollouts")]
    return Run(harness, 0, done.stderr, seconds, summary, results, calls, registered)


@dataclass
class Env:
    home: Path
    out: Path
    upstream: str


@pytest.fixture(scope="module")
def env(long_context_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Env:
    """dockerd, the base image and every bundle; a FORGE_HOME sharing this machine's environments and bundles."""
    requires("docker")
    bundles = _bundles()
    home = tmp_path_factory.mktemp("forge-home")
    for shared in ("envs", "models"):
        (home / shared).symlink_to(forge_home() / shared)
    (home / "harnesses").symlink_to(bundles)
    return Env(home, tmp_path_factory.mktemp("runs"), long_context_server.url)


def _report(run: Run) -> None:
    harness_s = [r["durations"].get("harness") for r in run.results]
    print(f"\n[e2e] {run.harness:15s} {run.seconds:5.0f}s  {run.summary.get('status')}  "
          f"calls {[r['calls'] for r in run.results]}  harness s {harness_s}", flush=True)


def _check(run: Run, samples: int) -> None:
    """Ran to an end, >=1 call per rollout in the harness's wire format with token ids, nothing for others."""
    harness = run.harness
    assert run.returncode == 0, f"forge rollout +harness={harness} failed:\n{run.stderr[-3000:]}"
    assert len(run.results) == samples == run.summary["rollouts"]
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
        assert with_ids, f"{harness}: no call completed: {[(c[3], c[4]) for c in mine]}\n{output}"
        for _, _, wire, path, _, prompt_ids, completion_ids, request, logprobs in with_ids:
            assert wire == WIRE[harness] and path.split("?")[0] == PATH_OF[wire]
            assert json.loads(prompt_ids), "prompt token ids from vLLM"
            assert json.loads(completion_ids), "completion token ids from vLLM"
            assert json.loads(request), "the harness's own request body"
            # one finite logprob per completion token, also for prompts past the model's native context (YaRN)
            values = json.loads(logprobs)
            assert len(values) == len(json.loads(completion_ids))
            assert all(v is not None and math.isfinite(v) for v in values), f"{harness}: non-finite logprobs"
    # nothing recorded for any other rollout (or under an id the run never registered)
    ids = {r["rollout_id"] for r in run.results}
    assert {c[0] for c in run.calls} == ids and set(run.registered) == ids


@pytest.mark.parametrize("harness", list(WIRE))
def test_real_harness_runs_to_an_end_through_the_proxy(env: Env, harness: str) -> None:
    run = _rollout(harness, env.home, env.out, env.upstream)
    _report(run)
    _check(run, 1)


def test_concurrent_mixed_harnesses_keep_their_records(env: Env) -> None:
    """8 rollouts of 4 harnesses (3 wire formats) in flight together: every record stays with its own rollout."""
    assert sum(CONCURRENT.values()) == 8
    started = time.monotonic()
    with ThreadPoolExecutor(len(CONCURRENT)) as pool:
        runs = list(pool.map(lambda h: _rollout(h, env.home, env.out, env.upstream, CONCURRENT[h]), CONCURRENT))
    print(f"\n[e2e] 8 concurrent rollouts of {len(runs)} harnesses: {time.monotonic() - started:.0f}s")
    seen: dict[str, str] = {}
    for run in runs:
        _report(run)
        _check(run, CONCURRENT[run.harness])
        for result in run.results:
            assert result["harness"] == run.harness
            assert result["rollout_id"] not in seen, f"{run.harness} and {seen[result['rollout_id']]} share an id"
            seen[result["rollout_id"]] = run.harness
        # the two rollouts behind this run's proxy each kept their own calls
        assert len({c[0] for c in run.calls}) == CONCURRENT[run.harness]
    assert len(seen) == 8
