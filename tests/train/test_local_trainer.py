"""The local trainer on the default model (CPU, no server): an update raises the logprob of a completion with a
positive advantage and lowers one with a negative advantage; logprobs at step 0 agree with the rollout's own;
several PPO epochs and mini-batches make that many AdamW steps against the start-of-step policy; the checkpoint is a
servable HF directory and restores the optimizer state; packing respects the token budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from forge_cli.config.compose import compose
from forge_cli.train.local import STATE_FILE, LocalTrainer, mini_batches, pack
from forge_cli.train.sample import Sample
from tests.requires import module, requires

torch = module("torch", "core")


def _model_dir() -> Path:
    from forge_cli.serve.prepare import default_model_dir

    requires("model")
    return default_model_dir()


def _sample(tokenizer: object, prompt: str, answer: str, advantage: float, rid: str) -> Sample:
    prompt_ids = tokenizer(prompt)["input_ids"]  # type: ignore[operator]
    answer_ids = tokenizer(answer)["input_ids"]  # type: ignore[operator]
    return Sample(rollout_id=rid, group_id="g", task_id="t", segment=0, prompt_ids=prompt_ids,
                  response_ids=answer_ids, loss_mask=[1] * len(answer_ids), rollout_logprobs=[0.0] * len(answer_ids),
                  reward=1.0 if advantage > 0 else 0.0, advantage=advantage)


def _trainer(lr: float = 1e-4, precision: str = "auto", trainer: tuple[str, ...] = (), **algo: object) -> LocalTrainer:
    exp = compose([f"trainer.learning_rate={lr}", f"trainer.precision={precision}", *trainer,
                   *(f"algo.{k}={v}" for k, v in algo.items())]).experiment
    return LocalTrainer(_model_dir(), exp.trainer, exp.algo)


def _logprob(trainer: LocalTrainer, sample: Sample) -> float:
    with torch.no_grad():
        logprobs, mask = trainer.logprobs([sample])
    return float((logprobs * mask).sum())


@pytest.mark.parametrize("precision", ["float32", "bf16"])
def test_an_update_moves_logprobs_with_the_advantage_sign(precision: str) -> None:
    from transformers import AutoTokenizer

    trainer = _trainer(precision=precision)
    assert trainer.bf16 == (precision == "bf16")
    tokenizer = AutoTokenizer.from_pretrained(_model_dir())
    prompt = "Task: create a.txt containing hi.\n"
    good = _sample(tokenizer, prompt, "```bash\necho hi > a.txt\n```", +1.0, "good")
    bad = _sample(tokenizer, prompt, "I cannot do that.", -1.0, "bad")
    # the rollout's logprobs as the engine would have returned them (same weights: step 0)
    for sample in (good, bad):
        with torch.no_grad():
            logprobs, _ = trainer.logprobs([sample])
        sample.rollout_logprobs = logprobs[0, :len(sample.response_ids)].tolist()
    before = {s.rollout_id: _logprob(trainer, s) for s in (good, bad)}
    metrics = trainer.train_step([good, bad])
    after = {s.rollout_id: _logprob(trainer, s) for s in (good, bad)}
    assert after["good"] > before["good"] and after["bad"] < before["bad"], (before, after)
    # at step 0 trainer and rollout logprobs agree up to numerics: the trainer packs both samples into one padded
    # batch, and bf16 matmuls round differently with the batch's shape (measured: ~0.03 on an AVX-512 machine, 0.11
    # on one with AMX bf16 tiles, whose kernels accumulate differently; float32 ~1e-6)
    tolerance = 0.2 if precision == "bf16" else 1e-4
    assert metrics["logprob_abs_delta_max"] < tolerance, "at step 0 trainer and rollout logprobs agree"
    assert abs(metrics["importance_ratio_mean"] - 1.0) < tolerance
    assert metrics["train_tokens"] == good.loss_tokens + bad.loss_tokens and metrics["grad_norm"] > 0
    # bf16 is autocast only: weights (so gradients and AdamW state) stay float32
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}


def test_precision_auto_means_bf16_only_where_it_is_native(monkeypatch: pytest.MonkeyPatch) -> None:
    from forge_cli.serve import server
    from forge_cli.train.local import uses_bf16

    assert uses_bf16("bf16", "cpu") and not uses_bf16("float32", "cpu") and not uses_bf16("float32", "cuda")
    monkeypatch.setattr(server, "cpu_has_native_bf16", lambda: False)
    assert not uses_bf16("auto", "cpu"), "AVX2-only CPUs emulate bf16: float32 is faster there"
    monkeypatch.setattr(server, "cpu_has_native_bf16", lambda: True)
    assert uses_bf16("auto", "cpu")


def test_learning_rate_zero_leaves_every_weight_bit_identical() -> None:
    """What makes benchmarks/learning.py's control a noise floor: an lr-0 update changes no weight at all."""
    from transformers import AutoTokenizer

    trainer = _trainer(lr=0.0)
    tokenizer = AutoTokenizer.from_pretrained(_model_dir())
    sample = _sample(tokenizer, "Task: create a.txt containing hi.\n", "```bash\necho hi > a.txt\n```", 1.0, "r")
    with torch.no_grad():
        logprobs, _ = trainer.logprobs([sample])
    sample.rollout_logprobs = logprobs[0, :len(sample.response_ids)].tolist()
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    metrics = trainer.train_step([sample])
    assert metrics["grad_norm"] > 0, "gradients were computed"
    assert all(torch.equal(before[name], p) for name, p in trainer.model.named_parameters())


def test_checkpoints_are_servable_and_restore_the_optimizer(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    trainer = _trainer()
    tokenizer = AutoTokenizer.from_pretrained(_model_dir())
    sample = _sample(tokenizer, "Say yes.\n", "yes", 1.0, "r")
    sample.advantage = 1.0
    trainer.train_step([sample])
    trainer.save(tmp_path / "step-1")
    names = {p.name for p in (tmp_path / "step-1").iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja", STATE_FILE} <= names
    again = _trainer()
    again.load(tmp_path / "step-1")
    assert again.steps == 1
    assert _logprob(again, sample) == pytest.approx(_logprob(trainer, sample), abs=1e-5)
    assert again.optimizer.state_dict()["state"], "AdamW moments restored"


def test_pack_keeps_micro_batches_within_the_token_budget() -> None:
    def s(n: int) -> Sample:
        return Sample(rollout_id=f"r{n}", group_id="g", task_id="t", segment=0, prompt_ids=[1] * n,
                      response_ids=[2], loss_mask=[1], rollout_logprobs=[0.0], reward=0.0)

    batches = pack([s(10), s(3), s(50), s(4), s(200)], max_tokens=60)
    assert sorted(len(x.input_ids) for b in batches for x in b) == [4, 5, 11, 51, 201]
    for batch in batches:
        assert len(batch) == 1 or max(len(x.input_ids) for x in batch) * len(batch) <= 60


def _rollout_logprobs(trainer: LocalTrainer, *samples: Sample) -> None:
    """The engine's logprobs as it would return them at step 0 (the trainer's own, same weights)."""
    for sample in samples:
        with torch.no_grad():
            logprobs, _ = trainer.logprobs([sample])
        sample.rollout_logprobs = logprobs[0, :len(sample.response_ids)].tolist()


def test_ppo_epochs_and_mini_batches_make_that_many_steps_against_the_start_policy() -> None:
    """trainer.ppo_epochs=2 x trainer.ppo_mini_batches=2: four AdamW steps in one train_step; the ratio of later
    updates is taken against the start-of-step policy, so PPO's clip engages (clip fraction > 0 at a large learning
    rate) where one update never clips; the mismatch metrics are those of the start-of-step weights."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(_model_dir())
    prompt = "Task: create a.txt containing hi.\n"

    def samples() -> list[Sample]:
        good = _sample(tokenizer, prompt, "```bash\necho hi > a.txt\n```", +1.0, "good")
        bad = _sample(tokenizer, prompt, "I cannot do that.", -1.0, "bad")
        good.group_id, bad.group_id = "g1", "g2"
        return [good, bad]

    single = _trainer(lr=1e-4, precision="float32")
    batch = samples()
    _rollout_logprobs(single, *batch)
    one = single.train_step(batch)
    assert one["optimizer_steps"] == 1 and one["clip_fraction"] == 0.0

    many = _trainer(lr=1e-4, precision="float32", trainer=("trainer.ppo_epochs=2", "trainer.ppo_mini_batches=2"))
    batch = samples()
    _rollout_logprobs(many, *batch)
    before = {s.rollout_id: _logprob(many, s) for s in batch}
    steps_before = {id(p): p.detach().clone() for p in many.model.parameters()}
    metrics = many.train_step(batch)
    after = {s.rollout_id: _logprob(many, s) for s in batch}
    assert metrics["optimizer_steps"] == 4 and many.steps == 1
    assert int(many.optimizer.state_dict()["state"][0]["step"]) == 4, "four AdamW steps"
    assert metrics["clip_fraction"] > 0, "later updates are clipped against the start-of-step policy"
    assert metrics["logprob_abs_delta_max"] < 1e-4, "mismatch measured under the start-of-step weights"
    assert metrics["train_tokens"] == sum(s.loss_tokens for s in batch), "each token counted once"
    assert after["good"] > before["good"] and after["bad"] < before["bad"], (before, after)
    assert any(not torch.equal(steps_before[id(p)], p) for p in many.model.parameters())


def test_mini_batches_keep_groups_whole() -> None:
    def s(group: str, n: int) -> Sample:
        return Sample(rollout_id=f"{group}{n}", group_id=group, task_id="t", segment=0, prompt_ids=[1],
                      response_ids=[2], loss_mask=[1], rollout_logprobs=[0.0], reward=0.0)

    batch = [s("a", 0), s("b", 0), s("a", 1), s("c", 0), s("b", 1), s("d", 0)]
    parts = mini_batches(batch, 2)
    assert [[x.rollout_id for x in part] for part in parts] == [["a0", "a1", "c0"], ["b0", "b1", "d0"]]
    assert [[x.rollout_id for x in part] for part in mini_batches(batch, 1)] == [["a0", "a1", "b0", "b1", "c0", "d0"]]
    assert len(mini_batches(batch, 9)) == 4, "at most one per group"
