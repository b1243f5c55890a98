"""``benchmarks/tool_calls.py``: tool calls counted from a real run's records (pi in docker, every model call served
by the teacher stand-in, which answers each train task with one tool call running its reference solution), and the
exit statuses ``benchmarks/verl_smoke.sh`` relies on: 1 when too few tool calls came back, 2 without records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import benchmark_module, forge

tool_calls = benchmark_module("tool_calls")
stages = benchmark_module("_sft_stages")


@pytest.mark.requires("docker", "harness:pi", "mitmproxy")
def test_a_real_harness_run_counts_its_tool_calls(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    draw = ["env.options.seed=0", "env.options.train_per_template=1"]
    module = stages.standin()
    with module.TeacherServer(module.builtin_teacher(draw)) as server:
        result = forge("rollout", "+harness=pi", "runtime=docker", "model=openai-compatible",
                       f"model.base_url={server.base_url}", "model.model=teacher-standin", "env.split=train",
                       "rollout.max_tasks=2", f"run.output_dir={tmp_path}", *draw, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert tool_calls.main([str(tmp_path), "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)
    # each rollout (2 tasks x the group's rollouts): a tool call running the solution, its result sent back, then
    # a final answer
    rollouts = len((next(tmp_path.iterdir()) / "results.jsonl").read_text().splitlines())
    assert rollouts >= 2
    assert counts == {"stores": 1, "calls": 2 * rollouts, "calls_with_tool_calls": rollouts, "tool_calls": rollouts,
                      "succeeded": rollouts}
    assert tool_calls.main([str(tmp_path), "--min", str(rollouts + 1)]) == 1
    assert f"fewer than --min {rollouts + 1}" in capsys.readouterr().err
    assert tool_calls.main([str(tmp_path / "nothing")]) == 2
