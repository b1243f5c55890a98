"""Real harnesses as a non-root user in a Kubernetes pod's process layout (issue 34: non-root must work).

A pod under the restricted Pod Security profile (forge's default, ``runtime.pod_security``) runs every process as
uid 1000 with ``sleep infinity`` as PID 1 and every command through exec. ``runtime=docker runtime.layout=pod
runtime.user=1000:1000`` is that layout on dockerd. pi (Node, Chat Completions) and Codex (a native binary,
Responses) each run a train task there with every model call served by the teacher stand-in, which answers with a
tool call running the task's reference solution: the tool call must come back with its result and the rollout score
1, so the harness's own files (HOME, config, session logs) and the task's all work as that user.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.helpers import benchmark_module, forge

tool_calls = benchmark_module("tool_calls")
stages = benchmark_module("_sft_stages")
NON_ROOT_POD = ["runtime=docker", "runtime.layout=pod", "runtime.user=1000:1000"]


@pytest.mark.parametrize("harness", [
    pytest.param("pi", marks=pytest.mark.requires("docker", "harness:pi", "mitmproxy")),
    # make test installs only pi's bundle; make test-e2e every harness's
    pytest.param("codex", marks=[pytest.mark.e2e, pytest.mark.requires("docker", "harness:codex", "mitmproxy")]),
])
def test_a_real_harness_runs_as_a_non_root_user_in_the_pod_layout(harness: str, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    draw = ["env.options.seed=0", "env.options.train_per_template=1"]
    module = stages.standin()
    with module.TeacherServer(module.builtin_teacher(draw)) as server:
        result = forge("rollout", f"+harness={harness}", *NON_ROOT_POD, "model=openai-compatible",
                       f"model.base_url={server.base_url}", "model.model=teacher-standin", "env.split=train",
                       "rollout.max_tasks=1", "rollout.samples_per_task=1", f"run.output_dir={tmp_path}", *draw,
                       timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = next(tmp_path.iterdir())
    results = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert [(r["status"], r["reward"]) for r in results] == [("ok", 1.0)], results
    runtime = yaml.safe_load((run_dir / "config.yaml").read_text())["runtime"]
    assert (runtime["layout"], runtime["user"]) == ("pod", "1000:1000")
    assert tool_calls.main([str(tmp_path), "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert counts["tool_calls"] >= 1 and counts["succeeded"] == counts["tool_calls"], counts
