"""`forge train` without a model: the dry run, and bad input as one message with exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import forge


def test_dry_run_prints_the_plan_and_starts_nothing(tmp_path: Path) -> None:
    result = forge("train", "--dry-run", f"run.output_dir={tmp_path}", "trainer.steps=3")
    assert result.returncode == 0, result.stderr
    assert "train: 3 steps x 4 tasks x 4 rollouts" in result.stdout and "split 'train'" in result.stdout
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(("args", "needle"), [
    (["algo.group_size=1"], "group_size 1"),
    (["trainer.no_such_option=3"], "no_such_option"),
    (["trainer.learning_rate=fast"], "learning_rate"),
    (["algo=nosuch"], "unknown option 'nosuch'"),
    (["--resume", "/nonexistent/run"], "is not a directory"),
    (["trainer=verl", "algo.dynamic_sampling=drop"], "dynamic_sampling=drop"),
    (["model=openai-compatible", "model.base_url=http://127.0.0.1:9/v1", "model.model=x", "proxy.upstream=http://127.0.0.1:9"],
     "cannot train"),
])
def test_bad_input_is_one_message_exit_2(tmp_path: Path, args: list[str], needle: str) -> None:
    extra = [f"run.output_dir={tmp_path}"] if args[0] != "--resume" else []
    result = forge("train", *args, *extra)
    assert result.returncode == 2, result.stderr
    assert needle in result.stderr and "Traceback" not in result.stderr
    assert not any(tmp_path.iterdir()), "nothing written that a resume would misread"
