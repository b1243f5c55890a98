"""One side of one configuration of benchmarks/trainer.py, measured in this process (its own peak RSS).

    .venv/bin/python benchmarks/_trainer_sides.py '{"config": "float32", "side": "baseline", "steps": 3, ...}'

Prints one JSON line: loss tokens and processed tokens, each per second, the timed seconds, peak RSS, the 1-minute
load average before and after the timed steps (the machine is shared) and the settings both sides took from forge's
composed config. Both sides read every setting from the same composed config
(``trainer.micro_batch_tokens``, ``learning_rate``, ``weight_decay``, ``max_grad_norm``, ``gradient_checkpointing``,
``precision``, ``lora``), pack micro-batches with forge's own ``pack``, run the same warm-up steps untimed and the same
number of optimizer steps timed.

- ``forge``: ``LocalTrainer.train_step`` (logprob recompute, PPO-clip, TIS, per-token loss weights, mismatch metrics;
  under bf16 the output projection in float32).
- ``baseline``: a plain transformers (+ peft for LoRA) loop given the same care: the same model loaded the same way,
  rows left-padded with position ids, logits only for the response positions (``logits_to_keep``, as forge), the
  token-mean cross-entropy of the loss tokens over the whole step (micro-batch sums divided by the step's loss tokens),
  the same gradient checkpointing (full model: ``gradient_checkpointing_enable()``; LoRA: reentrant checkpointing with
  ``enable_input_require_grads()``, peft's usual recipe and forge's), the same bf16 autocast with the output projection
  in float32 outside it (forge's numerics: bf16 logits are quantized to steps of 0.125), AdamW over the trainable
  parameters with forge's hyper-parameters, gradient clipping at ``max_grad_norm``.
"""

from __future__ import annotations

import json
import os
import random
import resource
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from forge_cli.config.compose import compose
from forge_cli.config.schema import TrainerConfig
from forge_cli.serve.prepare import default_model_dir
from forge_cli.train.local import LocalTrainer, pack
from forge_cli.train.sample import Sample

VOCAB = 49152  # SmolLM2's


def batches(n_steps: int, n_samples: int, prompt: int, response: int, vocab: int = VOCAB) -> list[list[Sample]]:
    """Synthetic agent samples: prompt and response lengths drawn from [half, full]; every other sample's response
    has its middle third masked out (a tool output between two merged calls: processed, not trained on);
    advantages +-1. Seeded: every process gets the same batches."""
    rng = random.Random(0)
    out = []
    for step in range(n_steps):
        samples = []
        for i in range(n_samples):
            p = rng.randint(prompt // 2, prompt)
            r = rng.randint(response // 2, response)
            mask = [1] * r
            if i % 2:
                mask[r // 3:2 * r // 3] = [0] * (2 * r // 3 - r // 3)
            samples.append(Sample(rollout_id=f"{step}-{i}", group_id=f"g{step}-{i // 4}", task_id="t", segment=0,
                                  prompt_ids=[rng.randrange(vocab) for _ in range(p)],
                                  response_ids=[rng.randrange(vocab) for _ in range(r)], loss_mask=mask,
                                  rollout_logprobs=[-2.0] * r, reward=float(i % 2), advantage=1.0 if i % 2 else -1.0))
        out.append(samples)
    return out


def overrides(spec: dict[str, Any]) -> list[str]:
    """forge's config overrides for a configuration; the baseline reads its settings from the same composition."""
    out = [f"trainer.micro_batch_tokens={spec['micro_batch_tokens']}",
           f"trainer.gradient_checkpointing={str(spec['gradient_checkpointing']).lower()}",
           f"trainer.precision={'bf16' if spec['config'] == 'bf16' else 'float32'}"]
    if spec["config"] == "lora":
        out.append(f"trainer.lora={{rank:{spec['lora']},alpha:{2 * spec['lora']}}}")
    return out


class Baseline:
    """The plain loop: transformers' model, peft's LoRA, torch's AdamW; nothing of forge but its ``pack``."""

    def __init__(self, model_dir: Path, trainer: TrainerConfig) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        torch.manual_seed(0)
        self.trainer = trainer
        self.bf16 = trainer.precision == "bf16"
        model: Any = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        if trainer.lora is not None:
            from peft import LoraConfig, get_peft_model

            model = get_peft_model(model, LoraConfig(
                r=trainer.lora.rank, lora_alpha=trainer.lora.alpha, lora_dropout=trainer.lora.dropout,
                target_modules=list(trainer.lora.target_modules), bias="none", task_type="CAUSAL_LM"))
        if trainer.gradient_checkpointing:
            if trainer.lora is not None:
                base = model.get_base_model()
                base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
                base.enable_input_require_grads()
            else:
                model.gradient_checkpointing_enable()
            model.config.use_cache = False
        model.train()
        self.model = model
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=trainer.learning_rate, weight_decay=trainer.weight_decay)

    def train_step(self, samples: list[Sample]) -> None:
        """One AdamW step on ``samples``: micro-batch losses (each its tokens' share of the step's token-mean)
        accumulated, the gradient clipped."""
        import torch

        total = sum(s.loss_tokens for s in samples)
        self.optimizer.zero_grad(set_to_none=True)
        for micro in pack(samples, self.trainer.micro_batch_tokens):
            self.loss(micro, total).backward()
        torch.nn.utils.clip_grad_norm_(self.params, self.trainer.max_grad_norm)
        self.optimizer.step()

    def loss(self, micro: list[Sample], total: int) -> Any:
        """The summed cross-entropy of the micro-batch's loss tokens over ``total``: rows left-padded (responses end
        at the last position), logits only for the response positions."""
        import torch
        import torch.nn.functional as F

        width = max(len(s.input_ids) for s in micro)
        span = max(len(s.response_ids) for s in micro)
        ids = torch.zeros((len(micro), width), dtype=torch.long)
        attention = torch.zeros((len(micro), width), dtype=torch.long)
        labels = torch.full((len(micro), span), -100, dtype=torch.long)
        for row, s in enumerate(micro):
            n, r = len(s.input_ids), len(s.response_ids)
            ids[row, width - n:] = torch.tensor(s.input_ids)
            attention[row, width - n:] = 1
            pairs = zip(s.response_ids, s.loss_mask, strict=True)
            labels[row, span - r:] = torch.tensor([t if m else -100 for t, m in pairs])
        positions = (attention.cumsum(-1) - 1).clamp_min(0)
        if self.bf16:  # the decoder under autocast, the output projection in float32 outside it, as forge
            with torch.autocast("cpu", dtype=torch.bfloat16):
                hidden = self.model.model(input_ids=ids, attention_mask=attention,
                                          position_ids=positions).last_hidden_state
            logits = self.model.lm_head(hidden[:, -(span + 1):].float())
        else:
            logits = self.model(input_ids=ids, attention_mask=attention, position_ids=positions,
                                logits_to_keep=span + 1).logits
        return F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]), labels.reshape(-1),
                               ignore_index=-100, reduction="sum") / total


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """Warm-up steps untimed, then ``steps`` optimizer steps timed; both token counts from the timed batches."""
    import torch

    model_dir = default_model_dir()
    exp = compose(overrides(spec)).experiment
    data = batches(spec["warmup"] + spec["steps"], spec["samples"], spec["prompt"], spec["response"])
    warm, timed = data[:spec["warmup"]], data[spec["warmup"]:]
    trainer: Any = (LocalTrainer(model_dir, exp.trainer, exp.algo) if spec["side"] == "forge"
                    else Baseline(model_dir, exp.trainer))
    if spec["side"] == "forge" and trainer.bf16 != (spec["config"] == "bf16"):
        raise SystemExit(f"forge's trainer chose bf16={trainer.bf16} for {spec['config']}")
    for samples in warm:
        trainer.train_step(samples)
    reported = 0.0
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    for samples in timed:
        metrics = trainer.train_step(samples)
        reported += metrics["train_tokens"] if metrics else 0.0
    seconds = time.monotonic() - started
    load_after = os.getloadavg()[0]
    loss_tokens = sum(s.loss_tokens for step in timed for s in step)
    processed = sum(len(s.input_ids) for step in timed for s in step)
    padded = sum(len(m) * max(len(s.input_ids) for s in m) for step in timed
                 for m in pack(step, exp.trainer.micro_batch_tokens))
    if spec["side"] == "forge" and int(reported) != loss_tokens:  # forge's own count must agree with ours
        raise SystemExit(f"forge counted {reported} loss tokens, the benchmark {loss_tokens}")
    t = exp.trainer
    return {"config": spec["config"], "side": spec["side"], "seconds": seconds, "optimizer_steps": len(timed),
            "loss_tokens": loss_tokens, "processed_tokens": processed, "padded_tokens": padded,
            "loss_tokens_per_s": loss_tokens / seconds, "processed_tokens_per_s": processed / seconds,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,  # KiB on Linux
            "threads": torch.get_num_threads(), "loadavg_1min": [load_before, load_after],
            "settings": {"precision": t.precision, "gradient_checkpointing": t.gradient_checkpointing,
                         "micro_batch_tokens": t.micro_batch_tokens, "learning_rate": t.learning_rate,
                         "weight_decay": t.weight_decay, "max_grad_norm": t.max_grad_norm,
                         "lora": t.lora.model_dump() if t.lora is not None else None}}


if __name__ == "__main__":
    print(json.dumps(measure(json.loads(sys.argv[1]))), flush=True)
