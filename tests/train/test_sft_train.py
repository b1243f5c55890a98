"""SFT in the local trainer (`forge_cli/train/sft.py`: ``nll``): two AdamW steps of token-mean NLL on a real
harness's teacher trajectories (pi through the proxy, answered by the teacher stand-in) lower the NLL of a
trajectory of another task that was held out of training; the loss covers the assistant spans only."""

from __future__ import annotations

from pathlib import Path

import pytest

from forge_cli.config.compose import compose
from forge_cli.rollout.reader import read_run
from forge_cli.train.sft import as_samples, load_student_tokenizer, nll, sft_sequences
from tests.train.test_sft_samples import teacher_run  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.mitm, pytest.mark.requires("harness:pi", "core", "model")]


def test_two_sft_steps_lower_the_nll_of_a_held_out_teacher_trajectory(teacher_run: Path) -> None:  # noqa: F811
    from forge_cli.serve.prepare import default_model_dir
    from forge_cli.train.local import LocalTrainer

    model_dir = default_model_dir()
    tokenizer = load_student_tokenizer(model_dir)
    sequences = [s for r in read_run(teacher_run) for s in sft_sequences(
        r.result.rollout_id, r.result.task_id, r.result.reward, r.calls, tokenizer)]
    held_out = [s for s in sequences if s.task_id == "json-csv-json-field-0"]
    train = [s for s in sequences if s.task_id != "json-csv-json-field-0"]
    assert len(held_out) == 1 and len(train) == 2
    exp = compose(["trainer.precision=float32", "trainer.gradient_checkpointing=false"]).experiment
    trainer = LocalTrainer(model_dir, exp.trainer, exp.algo)
    samples, probe = as_samples(train), as_samples(held_out)
    assert sum(s.loss_tokens for s in samples) == sum(s.loss_tokens for s in train)
    before = nll(trainer, probe, train=False)["nll"]
    steps = [nll(trainer, samples, train=True) for _ in range(2)]
    after = nll(trainer, probe, train=False)["nll"]
    assert all(s["grad_norm"] > 0 and s["loss_tokens"] == samples[0].loss_tokens + samples[1].loss_tokens
               for s in steps)
    assert after < before, (before, after)
    assert trainer.steps == 2
