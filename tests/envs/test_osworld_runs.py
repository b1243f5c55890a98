"""`forge eval` and `forge train` on env=osworld's shipped tasks, end to end: real harnesses in docker, real vLLM, a
desktop container per rollout, OSWorld's own setup and scoring. Slow (minutes per run on 2 cores): make test-e2e."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from forge_cli.desktop.container import LABEL_DESKTOP
from tests.envs.test_osworld_desktop import TERMINAL, _need
from tests.eval.test_eval_cli import _eval
from tests.helpers import REPO
from tests.requires import requires
from tests.train.test_train_run import _env

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.vllm, pytest.mark.mitm]

REACT = 'harness.command=[python3,"{{bundle}}/bin/forge-react",--max-steps,"2",--tools,text,"{{instruction}}"]'


def _graded(run_dir: Path, expected: int) -> list[dict[str, Any]]:
    results = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert len(results) == expected, results
    for r in results:
        assert r["status"] != "infra_error" and r["reward"] is not None, r
        logs = Path(r["logs"])
        assert "osworld: OSWorld's evaluator" in (logs / "verifier.log").read_text() or r["verifier"]
        assert list((logs / "desktop").glob("step-*.png")), "screenshots of the rollout"
        assert (logs / "desktop.log").is_file() and (logs / "desktop" / "evaluate.log").is_file()
    return results


def _no_desktops_left() -> None:
    out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={LABEL_DESKTOP}"], capture_output=True, text=True)
    assert not out.stdout.split(), "every desktop is gone after the run"


def test_forge_eval_with_react_in_accessibility_tree_mode(tmp_path: Path, policy_server: Any) -> None:
    _need()
    code, report, stderr = _eval(
        tmp_path, f"proxy.upstream={policy_server.url}", "proxy.port=0", f"run.output_dir={tmp_path / 'runs'}",
        "+env=osworld", "env.options.observation=a11y_tree", "env.options.a11y_max_tokens=600", REACT,
        "runtime=docker", "eval.trials=1", "model.max_output_tokens=64")
    assert code == 0, stderr
    results = _graded(Path(report["meta"]["run_dir"]), 3)
    assert {r["task_id"] for r in results} == {TERMINAL, "f0a9e7c2-forge-0002-calc-fruit",
                                               "f0a9e7c2-forge-0003-chrome-bookmark"}
    _no_desktops_left()


def test_forge_eval_with_an_mcp_harness(tmp_path: Path, policy_server: Any) -> None:
    """pi gets the computer-use tools over MCP (the desktop's screenshots as MCP image content)."""
    from forge_cli.paths import bundles_dir

    _need()
    requires("harness:pi")
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "harnesses").symlink_to(bundles_dir())
    code, report, stderr = _eval(
        tmp_path, f"proxy.upstream={policy_server.url}", "proxy.port=0", f"run.output_dir={tmp_path / 'runs'}",
        "+env=osworld", "+harness=pi", f"env.task_ids=[{TERMINAL}]", "env.options.a11y_max_tokens=600",
        "runtime=docker", "eval.trials=1", "model.max_output_tokens=64", "model.auto_context=true")
    assert code == 0, stderr
    (result,) = _graded(Path(report["meta"]["run_dir"]), 1)
    assert result["tools"]["mcp_methods"].get("tools/list"), result["tools"]
    _no_desktops_left()


def test_forge_train_one_step_with_react(tmp_path: Path, policy_server: Any) -> None:
    from forge_cli.serve.prepare import default_model_dir
    from forge_cli.serve.weights import update_weights, weight_version

    _need()
    args = [sys.executable, "-m", "forge_cli", "train", "--json", "+env=osworld", f"env.task_ids=[{TERMINAL}]",
            "env.options.a11y_max_tokens=600", REACT, "runtime=docker", "algo.group_size=2",
            "trainer.tasks_per_step=1", "trainer.steps=1", "trainer.precision=float32",
            "model.max_output_tokens=64", f"proxy.upstream={policy_server.url}", "proxy.port=0",
            f"run.output_dir={tmp_path / 'runs'}"]
    try:
        done = subprocess.run(args, cwd=REPO, env=_env(tmp_path), capture_output=True, text=True, timeout=1800)
        assert done.returncode == 0, done.stderr[-3000:]
        run_dir = next((tmp_path / "runs").iterdir())
        (metrics,) = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        assert metrics["step"] == 1 and metrics["weight_version"] == "step-1"
        assert weight_version(policy_server) == "step-1", "the policy server serves the trained weights"
        assert (run_dir / "checkpoints" / "step-1" / "model.safetensors").is_file()
        _graded(run_dir, 2)
    finally:
        update_weights(policy_server, default_model_dir(), version="default")
    _no_desktops_left()


def test_the_missions_example_trains_one_step_through_openclaw(tmp_path: Path, policy_server: Any) -> None:
    """`forge train +harness=openclaw +env=osworld` on the defaults (its context raised to fit OpenClaw's ~9,000-token
    first prompt by model.auto_context), made one step of one task x 2 rollouts long."""
    from forge_cli.paths import bundles_dir
    from forge_cli.serve.prepare import default_model_dir
    from forge_cli.serve.weights import update_weights

    _need()
    requires("harness:openclaw")
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "harnesses").symlink_to(bundles_dir())
    args = [sys.executable, "-m", "forge_cli", "train", "+harness=openclaw", "+env=osworld",
            f"env.task_ids=[{TERMINAL}]", "runtime=docker", "algo.group_size=2", "trainer.tasks_per_step=1",
            "trainer.steps=1", f"proxy.upstream={policy_server.url}", "proxy.port=0",
            f"run.output_dir={tmp_path / 'runs'}"]
    try:
        done = subprocess.run(args, cwd=REPO, env=_env(tmp_path), capture_output=True, text=True, timeout=3600)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "serving max_model_len=9216 instead of 8192" in done.stdout + done.stderr
        run_dir = next((tmp_path / "runs").iterdir())
        (metrics,) = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        assert metrics["step"] == 1
        _graded(run_dir, 2)
    finally:
        update_weights(policy_server, default_model_dir(), version="default")
    _no_desktops_left()
