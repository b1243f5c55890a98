"""``trainer.share_prefix`` (forge_cli/train/prefix.py): rows that share a prefix take it from one computation, and
the logprobs and the gradients are those of the unshared computation (float32, within rounding); packing counts the
shared prefix once; gradient checkpointing's backward passes and single rows are left unshared."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from forge_cli.config.compose import compose
from forge_cli.train.local import LocalTrainer, pack
from forge_cli.train.prefix import MIN_SHARED, common_prefix, micro_batch_size, shared_length
from forge_cli.train.sample import Sample
from tests.requires import module, requires

torch = module("torch", "core")


def _model_dir() -> Path:
    from forge_cli.serve.prepare import default_model_dir

    requires("model")
    return default_model_dir()


def _sample(prefix: list[int], own: int, answer: int, seed: int) -> Sample:
    rng = random.Random(seed)
    prompt = prefix + [rng.randrange(1000, 40000) for _ in range(own)]
    response = [rng.randrange(1000, 40000) for _ in range(answer)]
    mask = [1] * answer
    mask[answer // 2] = 0  # a tool result inside the response: not a loss token
    return Sample(rollout_id=f"r{seed}", group_id="g", task_id="t", segment=0, prompt_ids=prompt,
                  response_ids=response, loss_mask=mask, rollout_logprobs=[0.0] * answer, reward=1.0, advantage=1.0)


def _batch() -> list[Sample]:
    rng = random.Random(7)
    prefix = [rng.randrange(1000, 40000) for _ in range(300)]
    return [_sample(prefix, own, answer, n) for n, (own, answer) in enumerate(((5, 30), (40, 12), (0, 25)))]


def _trainer(*overrides: str) -> LocalTrainer:
    exp = compose(["trainer.precision=float32", "trainer.learning_rate=1e-4", *overrides]).experiment
    return LocalTrainer(_model_dir(), exp.trainer, exp.algo)


def _loss_and_grads(trainer: LocalTrainer, batch: list[Sample]) -> tuple[torch.Tensor, float, dict[str, torch.Tensor]]:
    trainer.model.zero_grad(set_to_none=True)
    logprobs, mask = trainer.logprobs(batch)
    loss = -(logprobs * mask).sum()
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    return logprobs.detach(), float(loss), grads


def test_shared_prefix_gives_the_unshared_logprobs_and_gradients() -> None:
    batch = _batch()
    assert shared_length(batch) == 299  # the third row's prompt is the prefix alone: its last token stays its own
    shared = _trainer("trainer.gradient_checkpointing=false")
    plain = _trainer("trainer.gradient_checkpointing=false", "trainer.share_prefix=false")
    a_logprobs, a_loss, a_grads = _loss_and_grads(shared, batch)
    b_logprobs, b_loss, b_grads = _loss_and_grads(plain, batch)
    assert torch.allclose(a_logprobs, b_logprobs, atol=2e-4), (a_logprobs - b_logprobs).abs().max()
    assert a_loss == pytest.approx(b_loss, rel=1e-5)
    assert a_grads.keys() == b_grads.keys() and len(a_grads) > 100
    for name, grad in a_grads.items():
        scale = float(b_grads[name].abs().max()) + 1e-6
        assert float((grad - b_grads[name]).abs().max()) <= 1e-3 * scale, name


def test_no_grad_passes_share_under_gradient_checkpointing_and_match() -> None:
    batch = _batch()
    checkpointed = _trainer()  # gradient checkpointing on (the default): forward-only passes still share
    assert checkpointed.sharing(grad=False) and not checkpointed.sharing(grad=True)
    plain = _trainer("trainer.share_prefix=false")
    with torch.no_grad():
        a, _ = checkpointed.logprobs(batch)
        b, _ = plain.logprobs(batch)
    assert torch.allclose(a, b, atol=2e-4), (a - b).abs().max()
    # and a backward pass under checkpointing is computed unshared: the same gradients as with sharing off
    _, a_loss, _ = _loss_and_grads(checkpointed, batch)
    _, b_loss, _ = _loss_and_grads(plain, batch)
    assert a_loss == pytest.approx(b_loss, rel=1e-5)


def test_packing_counts_the_shared_prefix_once() -> None:
    batch = _batch()
    longest = max(len(s.input_ids) for s in batch)
    assert micro_batch_size(batch, share=False) == 3 * longest
    assert micro_batch_size(batch, share=True) == 299 + 3 * (longest - 299)
    budget = 299 + 3 * (longest - 299)
    assert len(pack(batch, budget, share=True)) == 1
    assert len(pack(batch, budget, share=False)) == 3
    # rows that share less than MIN_SHARED are not worth a second forward call: packed as before
    rng = random.Random(3)
    short = [_sample([rng.randrange(1000, 40000) for _ in range(MIN_SHARED - 1)], 4, 9, n) for n in range(2)]
    short[1].prompt_ids[:MIN_SHARED - 1] = short[0].prompt_ids[:MIN_SHARED - 1]
    assert shared_length(short) == 0
    assert common_prefix([1, 2, 3, 4], [1, 2, 5]) == 2 and common_prefix(list(range(600)), list(range(600))) == 600
