"""`benchmarks/recovery.py` without running forge: the two arms differ only in branching (same budget, recipe, draw
and starting policy), an arm's budget is read from its run's metrics (each step once), the figures pair the same
tasks (pass@1 and mean score; branch against plain directly), and another option set in the same output directory
is refused. The benchmark itself runs from docs/results/recovery.md."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import benchmark_module

recovery = benchmark_module("recovery")


def _eval(directory: Path, scores: dict[str, tuple[float, float]]) -> Path:
    """An eval.json: task -> (pass@1, mean score); tasks named '<template>-<n>', unseen when the template is 'copy'."""
    directory.mkdir(parents=True)
    tasks = [{"task_id": task, "template": task.rsplit("-", 1)[0], "seen": not task.startswith("copy"),
              "guided": False, "pass_at": {"1": p}, "mean_score": m} for task, (p, m) in scores.items()]
    (directory / "eval.json").write_text(json.dumps({"tasks": tasks}))
    return directory


def test_the_arms_differ_only_in_branching() -> None:
    args, _ = recovery.parse(["--budget", "5000", "--init", "/"])
    plain, branch = recovery.arm_options(args, "plain"), recovery.arm_options(args, "branch")
    assert plain == ["algo.branch_at=off"]
    assert branch[0] == "algo.branch_at=first-failure" and all(o.startswith("algo.branch_") for o in branch)
    assert "trainer.max_sampled_tokens=5000" in recovery.recipe(args)
    with pytest.raises(SystemExit):
        recovery.parse(["--budget", "0"])


def test_an_arms_budget_counts_each_step_once(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    lines = [{"step": 1, "sampled_tokens": 900, "prefill_tokens_computed": 50, "step_s": 60},
             {"step": 2, "sampled_tokens": 700, "branch_prefix_tokens_replayed": 300, "branch_rollouts": 4,
              "branch_groups": 1, "branch_prefix_faithful": 1.0, "step_s": 30},
             {"step": 2, "sampled_tokens": 800, "branch_prefix_tokens_replayed": 200, "branch_rollouts": 4,
              "branch_groups": 1, "branch_prefix_faithful": 0.5, "step_s": 30}]  # step 2 written again (resume)
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    got = recovery.spent(recovery.Stage("train-branch", run_dir=run))
    assert got["steps"] == 2 and got["sampled_tokens"] == 1700 and got["prefix_tokens_replayed"] == 200
    assert got["saved_share"] == round(200 / 1900, 4) and got["branch_prefix_faithful_mean"] == 0.5
    assert got["train_minutes"] == 1.5


def test_figures_pair_the_same_tasks_and_compare_the_arms_directly(tmp_path: Path) -> None:
    before = {"copy-0": (0.0, 0.1), "copy-1": (0.0, 0.0), "find-0": (0.0, 0.2)}
    stages: dict[str, Any] = {
        "before": _eval(tmp_path / "before", before), "control": _eval(tmp_path / "control", before),
        "after-plain": _eval(tmp_path / "plain", {"copy-0": (0.0, 0.1), "copy-1": (0.0, 0.0), "find-0": (1.0, 1.0)}),
        "after-branch": _eval(tmp_path / "branch", {"copy-0": (1.0, 1.0), "copy-1": (0.0, 0.5), "find-0": (1.0, 1.0)})}
    stages = {k: recovery.Stage(k, run_dir=v) for k, v in stages.items()}
    passed = recovery.measured([stages], "pass@1")
    head = passed["branch_vs_plain"]["unseen"]
    assert head["tasks"] == 2 and head["before"] == 0.0 and head["after"] == 0.5  # plain 0/2, branch 1/2
    assert passed["pooled"]["plain"]["seen"]["after"] == 1.0 and passed["pooled"]["plain"]["unseen"]["delta"] == 0.0
    scored = recovery.measured([stages], "mean_score")
    unseen = scored["branch_vs_plain"]["unseen"]
    assert unseen["after"] == 0.75 and unseen["before"] == 0.05


def test_another_option_set_in_the_same_output_directory_is_refused(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    args, extra = recovery.parse(["--output-dir", str(tmp_path), "--budget", "100"])
    recovery.check_options(args, extra, "recovery")
    recovery.check_options(*recovery.parse(["--output-dir", str(tmp_path), "--budget", "100", "--repeats", "3"]),
                           "recovery")
    with pytest.raises(SystemExit) as exit_info:
        recovery.check_options(*recovery.parse(["--output-dir", str(tmp_path), "--budget", "200"]), "recovery")
    assert exit_info.value.code == 2 and "budget" in capsys.readouterr().err
    assert (tmp_path / "recovery-options.json").is_file()
