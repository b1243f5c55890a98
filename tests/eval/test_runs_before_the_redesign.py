"""Run directories written before issue 35's redesign still work (issue 35 item 6): `forge eval --compare` and
`--resume` read them, and their stored experiment validates with the renamed vocabulary read as the new one.

The fixture is two real `forge eval` runs through pi in docker (issue 32's SFT benchmark, repeat 0: the base policy
and the SFT checkpoint on the test split, 3 trials), written by forge at c0b37fa before the redesign, cut to 12 tasks
(config.yaml, results.jsonl and eval.json; rollouts and traces left out): their config spells the wire format
``chat_completions`` and the runtime as the former union's docker variant."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from forge_cli.config.runtimes import DockerRuntime
from forge_cli.envs.resolve import validate_experiment
from forge_cli.rollout.result import RolloutResult
from tests.helpers import forge

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs_before_redesign"


def test_compare_reads_runs_written_before() -> None:
    done = forge("eval", "--compare", str(RUNS / "before"), str(RUNS / "after"))
    assert done.returncode == 0, done.stderr
    line = next(row for row in done.stdout.splitlines() if row.startswith("answer-meeting-date-2"))
    assert "0.000 -> 1.000" in line and "+1.000" in line


def test_their_stored_experiment_validates_with_the_new_names() -> None:
    data = yaml.safe_load((RUNS / "after" / "config.yaml").read_text())
    assert data["harness"]["wire_api"] == "chat_completions"  # as it was written
    exp = validate_experiment(data)
    assert exp.harness.wire_api == "chat" and isinstance(exp.runtime, DockerRuntime)
    assert exp.trainer.kind == "local" and exp.algo.advantage == "grpo" and exp.algo.policy_loss == "vanilla"
    first = (RUNS / "after" / "results.jsonl").read_text().splitlines()[0]
    result = RolloutResult.from_dict(json.loads(first))
    assert result.wire_formats == {} and result.calls > 0  # a field added since: its default


def test_resume_plans_a_run_written_before(tmp_path: Path) -> None:
    run = tmp_path / "after"
    shutil.copytree(RUNS / "after", run)
    # the SFT checkpoint it evaluated lived on the machine that ran it (model.path, left as written): a checkpoint
    # directory in its place here, so that the dry run plans (what it checks of it: that the directory is there)
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    config = run / "config.yaml"
    data = yaml.safe_load(config.read_text())
    assert str(data["model"]["path"]).startswith("/root/learning-sft-pi/")
    data["model"]["path"] = str(checkpoint)
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    done = forge("eval", "--resume", str(run), "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "56 tasks x 3 trials" in done.stdout + done.stderr
