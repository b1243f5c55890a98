"""``trainer.max_sampled_tokens`` across a resume: the tokens a run already sampled are read back from its
metrics.jsonl (each step once, its last line winning, only steps up to the checkpoint resumed from) and from the
pending checkpoint of a step whose line was never written. The budget stopping a real run, and vLLM's counter
equalling the recorded live completion tokens: tests/train/test_train_branching.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forge_cli.config.compose import compose
from forge_cli.errors import UserError
from forge_cli.train.loop import PENDING_FILE, _spent


def _lines(run_dir: Path, *rows: dict[str, float]) -> None:
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_resumed_run_counts_the_steps_it_did(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoints" / "step-2"
    checkpoint.mkdir(parents=True)
    _lines(tmp_path, {"step": 1, "sampled_tokens": 100}, {"step": 2, "sampled_tokens": 40},
           {"step": 2, "sampled_tokens": 50}, {"step": 3, "sampled_tokens": 999})  # step 3: after the checkpoint
    assert _spent(tmp_path, checkpoint, 2) == 150


def test_a_pending_checkpoint_counts_its_step(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoints" / "step-2"
    checkpoint.mkdir(parents=True)
    _lines(tmp_path, {"step": 1, "sampled_tokens": 100})
    (checkpoint / PENDING_FILE).write_text(json.dumps({"sampled_tokens": 70}))
    assert _spent(tmp_path, checkpoint, 2) == 170


def test_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoints" / "step-2"
    checkpoint.mkdir(parents=True)
    _lines(tmp_path, {"step": 1, "sampled_tokens": 100})
    with (tmp_path / "metrics.jsonl").open("a") as log:
        log.write('{"step": 2, "sampled_tok')  # killed while writing
    assert _spent(tmp_path, checkpoint, 2) == 100


def test_runs_before_the_counters_count_nothing(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoints" / "step-1"
    checkpoint.mkdir(parents=True)
    _lines(tmp_path, {"step": 1, "reward_mean": 0.5})
    assert _spent(tmp_path, checkpoint, 1) == 0


def test_the_budget_is_the_local_trainers_and_positive() -> None:
    assert compose(["trainer.max_sampled_tokens=100"]).experiment.trainer.max_sampled_tokens == 100
    for bad in (["trainer.max_sampled_tokens=0"], ["trainer=verl", "trainer.max_sampled_tokens=100"]):
        with pytest.raises(UserError):
            assert compose(bad).experiment is None
