"""End to end: task tools over MCP with each real harness that takes MCP servers (Claude Code, Codex, opencode,
Qwen Code, OpenClaw, pi, Gemini CLI; their real binaries from their bundles). Each runs builtin's ``mail-reply``
task via ``forge rollout`` in a docker sandbox, through forge's capture proxy, against the real vLLM server on the
default model. The harness really connected to forge's tool server: the server saw the MCP handshake (``initialize``, or
``server/discover`` on protocol 2026-07-28, which Claude Code 2.1.332 speaks) and ``tools/list`` for that rollout,
and the model request the proxy recorded lists the task's tools (under each harness's own naming, e.g. Claude
Code's ``mcp__forge__<tool>``). A 135M model need not call them.

Measured here (2 loaded cores, float32 vLLM): the harness ran ~40 s, the test ~5.5 min with vLLM's start.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import LONG_CONTEXT
from tests.harness.test_e2e_harnesses import Env, env, harness_timeout  # noqa: F401 - the module's fixture
from tests.helpers import EXAMPLE_TASKS, REPO
from tests.requires import requires

pytestmark = [pytest.mark.e2e, pytest.mark.vllm, pytest.mark.docker, pytest.mark.mitm]

TOOLS = ("list_inbox", "read_email", "send_email")
# harnesses that show MCP tools to the model through their own tool catalog (search/describe/call tools) rather
# than one schema each, as deployed: OpenClaw (turning its catalog off put all ~42 of its tools' schemas in the
# prompt and its first prefill ran past 540 s here)
CATALOG = {"openclaw": {"tool_search", "tool_call"}}
MCP_HARNESSES = ("claude-code", "codex", "opencode", "qwen-code", "openclaw", "pi", "gemini-cli")


def _offered(request: dict[str, Any]) -> set[str]:
    """Tool names a recorded request offers the model (Chat Completions nests them under ``function``, the Gemini
    API under ``functionDeclarations``; Codex groups MCP tools in a Responses ``namespace`` tool, which the proxy
    gives the model as ``<namespace>__<name>``)."""
    names = set()
    for tool in request.get("tools") or []:
        names.add(str(tool.get("name") or (tool.get("function") or {}).get("name") or ""))
        names.update(str(d.get("name") or "") for d in tool.get("functionDeclarations") or ())
        if tool.get("type") == "namespace":
            names.update(f"{tool.get('name')}__{inner.get('name')}" for inner in tool.get("tools") or ())
    return names


@pytest.mark.parametrize("harness", MCP_HARNESSES)
def test_harness_connects_to_the_task_tools_over_mcp(env: Env, harness: str) -> None:  # noqa: F811
    args = [sys.executable, "-m", "forge_cli", "rollout", "--json", f"+harness={harness}", "runtime=docker",
            f"proxy.upstream={env.upstream}", "proxy.port=0", "tools.port=0", f"env.path={EXAMPLE_TASKS}",
            "env.task_ids=[mail-reply]",
            "rollout.samples_per_task=1", "rollout.concurrency=1", "model.max_output_tokens=64",
            f"model.max_model_len={LONG_CONTEXT}", f"harness.timeout_s={harness_timeout(harness)}",
            f"run.output_dir={env.out}", f"run.name=e2e-tools-{harness}"]
    started = time.monotonic()
    done = subprocess.run(args, capture_output=True, text=True, cwd=REPO, timeout=harness_timeout(harness) + 600,
                          env={**os.environ, "COLUMNS": "200", "FORGE_HOME": str(env.home)}, check=False)
    print(f"\n[e2e] {harness} + MCP task tools: {time.monotonic() - started:.0f}s", flush=True)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = Path(json.loads(done.stdout)["run_dir"])
    (result,) = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    logs = Path(result["logs"])
    output = "".join((logs / f"harness.{s}").read_text(errors="replace")[-1500:] for s in ("stdout", "stderr")
                     if (logs / f"harness.{s}").exists())
    assert result["status"] in ("ok", "agent_error"), f"{result['status']}: {result['error']}\n{output}"
    print(f"[e2e] tool server saw {result['tools']}", flush=True)
    # the harness connected to forge's tool server for this rollout: the MCP handshake (`initialize`, or
    # `server/discover` on protocol 2026-07-28, which Claude Code 2.1.332 speaks) and the tool listing
    methods = result["tools"]["mcp_methods"]
    handshake = methods.get("initialize", 0) + methods.get("server/discover", 0)
    assert handshake >= 1 and methods.get("tools/list", 0) >= 1, f"{methods}\n{output}"
    assert result["tool_calls"] == len((logs / "tool_calls.jsonl").read_text().splitlines()) \
        if (logs / "tool_calls.jsonl").exists() else result["tool_calls"] == 0
    # the model saw the task's tools: the recorded request (Anthropic Messages, as the harness sent it) lists them
    with sqlite3.connect(run_dir / "traces.sqlite") as db:
        requests = [json.loads(row[0]) for row in db.execute(
            "SELECT request FROM calls WHERE rollout_id = ? ORDER BY seq", (result["rollout_id"],))]
    assert requests, f"no call recorded for {result['rollout_id']}\n{output}"
    offered = set().union(*(_offered(request) for request in requests))
    if harness in CATALOG:
        assert CATALOG[harness] <= offered, f"{harness}: its tool catalog is not offered: {sorted(offered)}"
        return
    for name in TOOLS:
        assert any(o.endswith(name) for o in offered), f"{harness}: {name} not offered to the model: {sorted(offered)}"


def test_an_mcp_harness_gets_the_browser_of_a_miniwob_task(env: Env) -> None:  # noqa: F811
    """pi (a real MCP harness, in docker) on MiniWoB++'s click-button via forge eval: it connected to the rollout's
    browser tools over MCP, the model was offered them, and the page scored the trial (any score), offline."""
    from forge_cli.paths import forge_home

    requires("web")
    if not (env.home / "tools").exists():
        (env.home / "tools").symlink_to(forge_home() / "tools")
    args = [sys.executable, "-m", "forge_cli", "eval", "--json", "+harness=pi", "+env=miniwob", "runtime=docker",
            "env.options.envs=[click-button]", "env.options.test_seeds=1", "eval.trials=1",
            f"proxy.upstream={env.upstream}", "proxy.port=0", "tools.port=0", "model.max_output_tokens=64",
            f"model.max_model_len={LONG_CONTEXT}", f"harness.timeout_s={harness_timeout('pi')}",
            f"run.output_dir={env.out}", "run.name=e2e-miniwob-pi"]
    done = subprocess.run(args, capture_output=True, text=True, cwd=REPO, timeout=harness_timeout("pi") + 600,
                          env={**os.environ, "COLUMNS": "200", "FORGE_HOME": str(env.home)}, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = Path(json.loads(done.stdout)["meta"]["run_dir"])
    (result,) = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert result["status"] in ("ok", "agent_error") and result["reward"] is not None, result
    assert result["tools"]["mcp_methods"].get("tools/list", 0) >= 1
    assert (Path(result["logs"]) / "browser.log").is_file()
    with sqlite3.connect(run_dir / "traces.sqlite") as db:
        (request,) = db.execute("SELECT request FROM calls WHERE rollout_id = ? ORDER BY seq LIMIT 1",
                                (result["rollout_id"],)).fetchone()
    offered = _offered(json.loads(request))
    assert any(name.endswith("browser_click") for name in offered), sorted(offered)
