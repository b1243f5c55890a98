"""benchmarks/trainer.py's two sides do the same work: the plain baseline's loss on a packed micro-batch (left-padded,
logits only at the response positions, masked-out response tokens skipped) is forge's token-mean negative logprob of
the same tokens, in float32 and under bf16 autocast (both with the output projection in float32); its LoRA has
forge's trainable parameters; both read the same settings from one composed config; the synthetic batches are
seeded and mask a span of every other response."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from forge_cli.config.compose import compose
from forge_cli.train.local import LocalTrainer, pack
from tests.requires import module, requires

torch = module("torch", "core")
ROOT = Path(__file__).resolve().parents[2]


def _sides() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_trainer_sides", ROOT / "benchmarks" / "_trainer_sides.py")
    assert spec and spec.loader
    sides = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = sides
    spec.loader.exec_module(sides)
    return sides


def _model_dir() -> Path:
    from forge_cli.serve.prepare import default_model_dir

    requires("model")
    return default_model_dir()


def _spec(config: str, **extra: Any) -> dict[str, Any]:
    return {"config": config, "micro_batch_tokens": 4096, "gradient_checkpointing": True, "lora": 4, **extra}


def test_batches_are_seeded_and_mask_a_span_of_every_other_response() -> None:
    sides = _sides()
    first, again = sides.batches(2, 4, 40, 30), sides.batches(2, 4, 40, 30)
    assert [[s.input_ids for s in step] for step in first] == [[s.input_ids for s in step] for step in again]
    for step in first:
        for i, sample in enumerate(step):
            assert 20 <= len(sample.prompt_ids) <= 40 and 15 <= len(sample.response_ids) <= 30
            r = len(sample.response_ids)
            assert sample.loss_tokens == (r - (2 * r // 3 - r // 3) if i % 2 else r)


def test_both_sides_compose_the_same_settings() -> None:
    sides = _sides()
    for config, precision in (("float32", "float32"), ("bf16", "bf16"), ("lora", "float32")):
        trainer = compose(sides.overrides(_spec(config, gradient_checkpointing=False))).experiment.trainer
        assert (trainer.precision, trainer.gradient_checkpointing, trainer.micro_batch_tokens) == (precision, False,
                                                                                                     4096)
        assert (trainer.lora is not None) == (config == "lora")
    lora = compose(sides.overrides(_spec("lora"))).experiment.trainer.lora
    assert lora is not None and (lora.rank, lora.alpha) == (4, 8)


@pytest.mark.parametrize("config", ["float32", "bf16"])
def test_the_baseline_loss_is_forges_token_mean_nll(config: str) -> None:
    sides = _sides()
    exp = compose(sides.overrides(_spec(config))).experiment
    samples = sides.batches(1, 3, 24, 12)[0]
    forge = LocalTrainer(_model_dir(), exp.trainer, exp.algo)
    baseline = sides.Baseline(_model_dir(), exp.trainer)
    total = sum(s.loss_tokens for s in samples)
    with torch.no_grad():
        micro = pack(samples, exp.trainer.micro_batch_tokens)
        assert len(micro) == 1
        logprobs, mask = forge.logprobs(micro[0])
        expected = float(-(logprobs * mask).sum() / total)
        got = float(baseline.loss(micro[0], total))
    assert mask.sum() == total < sum(len(s.response_ids) for s in samples)
    assert got == pytest.approx(expected, rel=1e-4 if config == "float32" else 2e-2)


def test_the_baseline_lora_trains_forges_parameters() -> None:
    sides = _sides()
    exp = compose(sides.overrides(_spec("lora"))).experiment
    forge = LocalTrainer(_model_dir(), exp.trainer, exp.algo)
    baseline = sides.Baseline(_model_dir(), exp.trainer)
    trained = {n: p.shape for n, p in forge.model.named_parameters() if p.requires_grad}
    assert trained and trained == {n: p.shape for n, p in baseline.model.named_parameters() if p.requires_grad}
    assert baseline.optimizer.defaults["weight_decay"] == forge.optimizer.defaults["weight_decay"]
    assert baseline.optimizer.defaults["lr"] == forge.optimizer.defaults["lr"]
