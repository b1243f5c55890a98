"""`forge eval` end to end: scripted harnesses for the bookkeeping (trials, pass@k/pass^k, infra retries,
resume, compare, bad input), and the react harness with the default model on the builtin test split."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from forge_cli.envs.verifier import Score, VerifierError, VerifyContext
from forge_cli.paths import forge_home
from tests.helpers import forge
from tests.rollout.test_rollout_run import NO_UPSTREAM, _script_harness

pytestmark = pytest.mark.mitm


def flaky(ctx: VerifyContext, marker_dir: str) -> Score:
    """Fails (an infra error) the first time each trial is verified, then judges answer.txt."""
    marker = Path(marker_dir) / f"{ctx.task.id}-{ctx.rollout_id.split('-')[-2]}"
    if not marker.exists():
        marker.touch()
        raise VerifierError("the grading service is down")
    return Score(reward=1.0, passed=True)


def _eval(tmp_path: Path, *args: str, config_dir: Path | None = None) -> tuple[int, Any, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    for shared in ("envs", "models"):
        if not (home / shared).exists():
            (home / shared).symlink_to(forge_home() / shared)
    extra = ["--config-dir", str(config_dir)] if config_dir else []
    result = forge("eval", "--json", *args, *extra,
                   env={"FORGE_HOME": str(home), "FORGE_SANDBOX_DIR": str(tmp_path / "sbx")}, timeout=1200)
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, json.loads(result.stdout) if result.returncode == 0 else None, result.stderr


def _tasks(tmp_path: Path, tasks: list[dict[str, Any]]) -> str:
    path = tmp_path / "tasks.yaml"
    path.write_text(yaml.safe_dump(tasks, sort_keys=False))
    return str(path)


TWO_TASKS = [
    {"id": "easy", "category": "a", "instruction": "please solve", "verify": "grep -qx 42 answer.txt"},
    {"id": "hard", "category": "b", "instruction": "impossible", "verify": "grep -qx 42 answer.txt"},
]
SOLVER = 'case "$1" in *solve*) echo 42 > answer.txt;; esac'


def test_trials_reports_resume_and_compare(tmp_path: Path) -> None:
    config_dir = _script_harness(tmp_path, "solver", SOLVER)
    common = ["+harness=solver", NO_UPSTREAM, "proxy.port=0", f"env.path={_tasks(tmp_path, TWO_TASKS)}",
              f"run.output_dir={tmp_path / 'runs'}"]
    code, report, stderr = _eval(tmp_path, *common, "eval.trials=3", config_dir=config_dir)
    assert code == 0, stderr
    run_dir = Path(report["meta"]["run_dir"])
    assert (run_dir / "eval.json").is_file() and (run_dir / "report.html").is_file()
    saved = json.loads((run_dir / "eval.json").read_text())
    overall = saved["metrics"]["overall"] if "metrics" in saved else saved["overall"]
    text = json.dumps(overall)
    assert '"pass@1"' in text or "pass_at" in text
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    assert len(lines) == 6
    by_task: dict[str, list[bool]] = {}
    for line in lines:
        r = json.loads(line)
        by_task.setdefault(r["task_id"], []).append(r["passed"])
    assert by_task == {"easy": [True] * 3, "hard": [False] * 3}
    assert "easy" in (run_dir / "report.html").read_text()

    # an interrupted eval: two trials never ended; --resume runs just those
    (run_dir / "results.jsonl").write_text("\n".join(lines[:4]) + "\n")
    (run_dir / "eval.json").unlink()
    code, _, stderr = _eval(tmp_path, "--resume", str(run_dir), config_dir=None)
    assert code == 0, stderr
    assert len((run_dir / "results.jsonl").read_text().splitlines()) == 6
    assert (run_dir / "eval.json").is_file()

    # compare the run with itself: no difference
    other = forge("eval", "--compare", str(run_dir), str(run_dir))
    assert other.returncode == 0, other.stderr
    assert "+0.000" in other.stdout and "easy" not in other.stderr


def test_infra_errors_are_retried_and_never_counted_as_failures(tmp_path: Path) -> None:
    config_dir = _script_harness(tmp_path, "solver", SOLVER)
    markers = tmp_path / "markers"
    markers.mkdir()
    tasks = [{"id": "easy", "instruction": "solve", "verifier": {
        "kind": "python", "function": "tests.eval.test_eval_cli:flaky", "args": {"marker_dir": str(markers)}}}]
    code, _, stderr = _eval(tmp_path, "+harness=solver", NO_UPSTREAM, "proxy.port=0",
                            f"env.path={_tasks(tmp_path, tasks)}", f"run.output_dir={tmp_path / 'runs'}",
                            "eval.trials=2", "eval.retries=1", config_dir=config_dir)
    assert code == 0, stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    results = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert sorted(r["status"] for r in results) == ["infra_error", "infra_error", "ok", "ok"]
    assert len({r["rollout_id"] for r in results}) == 4, "a retry is a new rollout"
    saved = (run_dir / "eval.json").read_text()
    assert '"infra_errors": 0' in saved or '"infra_errors": []' in saved


@pytest.mark.parametrize(("args", "needle"), [
    (["--resume", "/nonexistent/run"], "is not a directory"),
    (["env.split=nope"], "unknown split 'nope'"),
    (["env.path=/nonexistent/tasks.yaml"], "/nonexistent/tasks.yaml"),
    (["--compare", "/nonexistent/a", "/nonexistent/b"], "/nonexistent/a"),
])
def test_bad_input_is_one_message_exit_2(tmp_path: Path, args: list[str], needle: str) -> None:
    result = forge("eval", *args, f"run.output_dir={tmp_path}" if not args[0].startswith("--") else "--json")
    assert result.returncode == 2, result.stderr
    assert needle in result.stderr and "Traceback" not in result.stderr
    assert not any(tmp_path.iterdir()), "nothing written that a resume would misread"


@pytest.mark.vllm
@pytest.mark.docker
def test_eval_react_on_the_builtin_test_split(tmp_path: Path, policy_server: Any) -> None:
    """The default harness and model on (a slice of) the builtin test split: three reports written. In docker: the
    model's commands (it once answered a cleanup task with `rm -r *`) never run on this machine."""
    code, report, stderr = _eval(
        tmp_path, f"proxy.upstream={policy_server.url}", "proxy.port=0", f"run.output_dir={tmp_path / 'runs'}",
        'harness.command=[python3,"{{bundle}}/bin/forge-react",--max-steps,"2",--tools,text,"{{instruction}}"]',
        "runtime=docker", "env.task_ids=[create-edit-write-file-2,create-edit-touch-guided-2,"
        "create-edit-delete-lines-2]", "eval.trials=2", "eval.temperature=0.3", "model.max_output_tokens=96")
    assert code == 0, stderr
    # the held-out view: a seen task of each kind and an unseen one, apart
    assert set(report["exposure"]) == {"seen", "seen/guided", "seen/not guided", "unseen", "unseen/not guided"}
    assert report["exposure"]["unseen"]["tasks"] == 1
    run_dir = Path(report["meta"]["run_dir"])
    assert (run_dir / "eval.json").is_file() and (run_dir / "report.html").is_file()
    assert report["meta"]["split"] == "test" and report["meta"]["trials"] == 2
    results = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert len([r for r in results if r["status"] != "infra_error"]) == 6
    assert all(r["calls"] >= 1 for r in results if r["status"] == "ok")
