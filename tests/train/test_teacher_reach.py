"""`benchmarks/teacher_reach.py`: the share of teacher trajectories at reward 1 per harness, its interval resampling
templates, and what the others ended as; a harness without its bundle is reported as not installed, never scored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import benchmark_module

reach = benchmark_module("teacher_reach")


def test_share_at_reward_1_with_a_template_clustered_interval(tmp_path: Path) -> None:
    rows = [("answer-lookup-0", "ok", 1.0, 2), ("answer-lookup-3", "ok", 1.0, 2),
            ("fix-script-fix-typo-0", "ok", 0.0, 3), ("fix-script-fix-typo-1", "timeout", None, 5),
            ("count-lines-2", "ok", 1.0, 2)]
    with (tmp_path / "results.jsonl").open("w") as out:
        for n, (task, status, reward, calls) in enumerate(rows):
            out.write(json.dumps({"rollout_id": f"r{n}", "task_id": task, "group_id": "g", "harness": "pi",
                                  "status": status, "reward": reward, "calls": calls}) + "\n")
    figures = reach.reach(tmp_path)
    assert figures["rollouts"] == 5 and figures["templates"] == 3 and figures["reward_1"] == 3
    assert figures["share"] == pytest.approx(0.6) and figures["calls_per_rollout"] == pytest.approx(2.8)
    assert figures["low"] <= 0.6 <= figures["high"]
    assert figures["not_reward_1"] == {"ok, reward 0": 1, "timeout": 1}
    assert reach.reach(tmp_path / "nothing") == {"rollouts": 0}


def test_only_installed_bundles_are_measured() -> None:
    assert reach.installed("react")  # forge's own: no bundle
    with pytest.raises(Exception, match="no-such-harness"):
        reach.installed("no-such-harness")
