"""``trainer=local``: forge's single-process trainer (one CPU or one GPU, the HF transformers model).

Per ``train_step(samples)``: samples are packed into micro-batches of at most ``trainer.micro_batch_tokens`` tokens
(right-padded), each micro-batch's forward pass recomputes the policy's logprobs of the response tokens, the policy
loss (``forge_cli/train/algos.py``: PPO-clip, TIS, KL) is weighted so that the accumulated gradient equals the whole
batch's loss under ``algo.loss_agg_mode``, and one AdamW step follows (gradient clipping ``trainer.max_grad_norm``);
``trainer.ppo_epochs`` passes x ``trainer.ppo_mini_batches`` mini-batches of whole groups make that many AdamW steps
per training step, PPO's ratio taken against the start-of-step policy. ``trainer.precision`` bf16 runs the passes
under bf16 autocast (weights, gradients and optimizer state stay float32); ``auto`` picks it where bf16 is native.
The logprobs are raw ``log_softmax`` of the logits (temperature 1), the quantity vLLM returns by default
(``--logprobs-mode raw_logprobs``), so at step 0 the trainer's and the rollout's logprobs of the same tokens agree
up to numerics; every step reports the mismatch (mean and max |delta|) and the importance ratio.

Checkpoints are HF safetensors directories (weights, config, tokenizer and chat template), servable as they are,
with ``trainer_state.pt`` beside them (optimizer, step, RNG).

With ``trainer.lora`` (``forge_cli/train/lora.py``) the model is wrapped with peft LoRA adapters: only they are
trainable and in AdamW, KL's reference is the base with the adapter disabled, and checkpoints hold the adapter
(PEFT format) instead of full weights. ``model_dir`` may itself be a LoRA checkpoint: its adapter is trained on
(``trainer.lora`` set, same settings) or merged into the weights trained in full (``trainer.lora`` null).

A vision-language checkpoint (a config with a vision tower: SmolVLM/Idefics3, Qwen2.5-VL) is loaded as an
image-text-to-text model; samples with images (screenshots) get their pixel values from the checkpoint's own image
processor, the same one vLLM's multimodal processor used, so the image placeholders in the recorded token ids line
up with the image features (such rows go through the model one at a time).
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forge_cli.config.schema import AlgoConfig, TrainerConfig
from forge_cli.errors import UserError
from forge_cli.train import lora
from forge_cli.train.backend import TrainerBackend
from forge_cli.train.prefix import MIN_SHARED, common_prefix, shared_length
from forge_cli.train.sample import Sample

if TYPE_CHECKING:
    import torch

STATE_FILE = "trainer_state.pt"
# files of the model directory copied into every checkpoint (the tokenizer and forge's tool chat template)
MODEL_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
               "generation_config.json", "vocab.json", "merges.txt", "processor_config.json",
               "preprocessor_config.json")


def is_vision_model(directory: Path) -> bool:
    """Whether the HF directory holds a vision-language model (its config has a vision tower)."""
    import json

    try:
        return "vision_config" in json.loads((directory / "config.json").read_text())
    except (OSError, ValueError):
        return False


def load_model(directory: Path) -> Any:
    """The HF model of ``directory`` in float32: a causal LM, or an image-text-to-text model for a vision-language
    checkpoint (SmolVLM/Idefics3, Qwen2.5-VL, ...)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    loader: Any = AutoModelForImageTextToText if is_vision_model(directory) else AutoModelForCausalLM
    return loader.from_pretrained(directory, dtype=torch.float32)


def pack(samples: list[Sample], max_tokens: int, share: bool = False) -> list[list[Sample]]:
    """Consecutive micro-batches whose size stays within ``max_tokens``: rows x longest row after padding, or with
    ``share`` (``forge_cli/train/prefix.py``) their shared prefix once plus rows x longest suffix; a sample longer
    than that is a micro-batch of its own."""

    batches: list[list[Sample]] = []
    current: list[Sample] = []
    longest = shared = 0
    for sample in sorted(samples, key=lambda s: len(s.input_ids)):
        size = len(sample.input_ids)
        grown = 0  # the shared prefix with this sample added
        if share and current:
            grown = common_prefix(current[0].input_ids, sample.input_ids, min(shared, len(sample.prompt_ids) - 1))
            grown = grown if grown >= MIN_SHARED else 0
        if current and grown + (max(longest, size) - grown) * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        if not current:  # a row alone: the most a later row can share with it
            grown = len(sample.prompt_ids) - 1 if share else 0
        current.append(sample)
        longest, shared = max(longest, size), grown
    if current:
        batches.append(current)
    return batches


def mini_batches(samples: list[Sample], count: int) -> list[list[Sample]]:
    """The step's samples in ``count`` mini-batches of whole groups (a group's rollouts share one update), groups in
    order of first appearance and spread as evenly as they go; fewer mini-batches when there are fewer groups."""
    groups: dict[str, list[Sample]] = {}
    for sample in samples:
        groups.setdefault(sample.group_id, []).append(sample)
    ordered = list(groups.values())
    count = max(1, min(count, len(ordered)))
    return [[s for group in ordered[i::count] for s in group] for i in range(count)]


@dataclass
class _Totals:
    """What one step's updates add up (``LocalTrainer.train_step``)."""

    loss: float = 0.0
    grad_norm: float = 0.0
    clip: float = 0.0
    tokens: int = 0
    deltas: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)


class LocalTrainer(TrainerBackend, kind="local"):
    """One process, the HF model, AdamW."""

    def __init__(self, model_dir: Path, trainer: TrainerConfig, algo: AlgoConfig, device: str = "cpu",
                 seed: int = 0) -> None:
        import torch

        torch.manual_seed(seed)
        self.model_dir = Path(model_dir).resolve()
        self.trainer, self.algo = trainer, algo
        self.device = torch.device("cuda" if device == "gpu" and torch.cuda.is_available() else "cpu")
        self.bf16 = uses_bf16(trainer.precision, self.device.type)
        self.model: Any = self._build(self.model_dir)
        # a vision-language policy: its image processor turns a sample's images into pixel values
        self.image_processor: Any = None
        if is_vision_model(self.model_dir):
            from transformers import AutoProcessor

            self.image_processor = AutoProcessor.from_pretrained(self.model_dir).image_processor
        self._prepare_model()
        self.optimizer = self._optimizer()
        self.steps = 0
        self.reference: Any = None

    def _build(self, directory: Path) -> Any:
        """The policy from ``directory`` (a full HF directory, or a LoRA checkpoint on its base): the full model,
        or with ``trainer.lora`` the base wrapped with LoRA adapters (fresh, or those saved in ``directory``)."""
        from forge_cli.serve.adapter import is_adapter_dir

        adapter = is_adapter_dir(directory)
        model: Any = load_model(lora.base_directory(directory))
        if self.trainer.lora is not None:
            if adapter:
                lora.check_matches(directory, self.trainer.lora)
                model = lora.load_adapter(model, directory)
            else:
                model = lora.wrap(model, self.trainer.lora)
        elif adapter:
            model = lora.load_adapter(model, directory, trainable=False).merge_and_unload()
        return model.to(self.device)

    def _optimizer(self) -> Any:
        """AdamW over the trainable parameters (all, or only the LoRA adapters)."""
        import torch

        params = [p for p in self.model.parameters() if p.requires_grad]
        return torch.optim.AdamW(params, lr=self.trainer.learning_rate, weight_decay=self.trainer.weight_decay)

    def _prepare_model(self) -> None:
        """Training mode; under bf16 autocast the output projection still in float32 (``_float32_head``); with
        ``trainer.gradient_checkpointing`` each layer's activations are recomputed in the backward pass instead of
        kept (attention over a 2,000-token row holds ~150 MB per layer otherwise)."""
        if self.trainer.gradient_checkpointing:
            if self.trainer.lora is not None:
                # reentrant checkpointing (inputs made to require grad: the frozen embeddings give none): measured on
                # 8 rows of <= 420 tokens, 1.3 GB held after the forward pass against 3.7 GB with torch's
                # non-reentrant checkpointing, which keeps far more around the frozen layers
                base = self.model.get_base_model()
                base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
                base.enable_input_require_grads()
            else:
                self.model.gradient_checkpointing_enable()
            self.model.config.use_cache = False
        if self.bf16:
            _float32_head(self.model)
        self.model.train()

    # ------------------------------------------------------------------ the update
    def logprobs(self, batch: list[Sample]) -> tuple[torch.Tensor, torch.Tensor]:
        """(logprobs of each response token under the current policy, the response mask) for a micro-batch,
        both [rows, longest response], each row's response from column 0.

        Rows are left-padded so that every response ends at the last position; the model computes logits only for
        the last ``longest response + 1`` positions (``logits_to_keep``), which keeps the [rows, positions, vocab]
        tensor small (the vocabulary is ~49k for the default model)."""
        import torch

        if len(batch) > 1 and any(s.images for s in batch):
            # rows with images one at a time: each row's images are its own pixel values
            rows = [self.logprobs([s]) for s in batch]
            span = max(r[0].shape[1] for r in rows)
            out = torch.zeros((len(batch), span), device=self.device)
            mask = torch.zeros((len(batch), span), device=self.device)
            for row, (values, row_mask) in enumerate(rows):
                out[row, :values.shape[1]], mask[row, :row_mask.shape[1]] = values[0], row_mask[0]
            return out, mask
        # a prefix every row shares, computed once (forge_cli/train/prefix.py); each row's own part after it
        shared = shared_length(batch) if self._shares(batch) else 0
        width = max(len(s.input_ids) for s in batch) - shared
        span = max(len(s.response_ids) for s in batch)
        ids = torch.zeros((len(batch), width), dtype=torch.long)
        attention = torch.zeros((len(batch), shared + width), dtype=torch.long)
        attention[:, :shared] = 1
        for row, sample in enumerate(batch):
            n = len(sample.input_ids) - shared
            ids[row, width - n:] = torch.tensor(sample.input_ids[shared:])
            attention[row, shared + width - n:] = 1
        positions = (attention.cumsum(-1) - 1).clamp_min(0)[:, shared:]
        ids, attention, positions = ids.to(self.device), attention.to(self.device), positions.to(self.device)
        # bf16 autocast: matmuls in bf16, the weights (and so gradients and AdamW state) stay float32
        pixels = self._pixels(batch[0]) if batch[0].images else {}
        # a checkpointed model in training mode drops caches: a forward-only pass that shares runs in eval mode
        training = self.model.training
        if shared and self.trainer.gradient_checkpointing:
            self.model.eval()
        try:
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
                cache = self._prefix_cache(batch[0].input_ids[:shared], len(batch)) if shared else {}
                logits = self.model(input_ids=ids, attention_mask=attention, position_ids=positions,
                                    logits_to_keep=span + 1, **cache, **pixels).logits.float()
        finally:
            self.model.train(training)
        # logits[:, j] predicts the token at position width - span - 1 + j + 1; response token i of a row (of n
        # response tokens) sits at position width - n + i
        targets = ids[:, width - span:]
        token_logprobs = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, targets[..., None]).squeeze(-1)
        out = torch.zeros((len(batch), span), device=self.device)
        mask = torch.zeros((len(batch), span), device=self.device)
        for row, sample in enumerate(batch):
            n = len(sample.response_ids)
            out[row, :n] = token_logprobs[row, span - n:]
            mask[row, :n] = torch.tensor(sample.loss_mask, dtype=torch.float32)
        return out, mask

    def sharing(self, grad: bool) -> bool:
        """Do micro-batches take their shared prefix from one computation (``trainer.share_prefix``), in a pass
        with (``grad``) or without a backward pass? Not where gradient checkpointing recomputes the forward pass."""
        return self.trainer.share_prefix and not (grad and self.trainer.gradient_checkpointing)

    def _shares(self, batch: list[Sample]) -> bool:
        import torch

        if len(batch) < 2 or any(s.images for s in batch):
            return False
        return self.sharing(torch.is_grad_enabled())

    def _prefix_cache(self, prefix: list[int], rows: int) -> dict[str, Any]:
        """The key/value cache of ``prefix`` (one forward pass), repeated for ``rows`` rows."""
        import torch
        from transformers import DynamicCache

        cache = DynamicCache()
        ids = torch.tensor([prefix], dtype=torch.long, device=self.device)
        self.model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        cache.batch_repeat_interleave(rows)
        return {"past_key_values": cache, "use_cache": True}

    def _pixels(self, sample: Sample) -> dict[str, Any]:
        """The model's image inputs for one sample (``pixel_values`` and what else its processor gives)."""
        from forge_cli.train.verl.convert import decode_images

        if self.image_processor is None:
            raise ValueError(f"sample {sample.rollout_id}/{sample.segment} has images but {self.model_dir} is not a "
                             "vision-language model")
        processed = self.image_processor(images=[decode_images(sample.images)], return_tensors="pt")
        return {k: v.to(self.device) for k, v in processed.items() if k.startswith("pixel") or k.endswith("_thw")}

    def batch_weights(self, samples: list[Sample]) -> dict[int, torch.Tensor]:
        """Per-token loss weights of each sample (``algos.token_loss_weights`` over the whole batch, the segments
        of one rollout forming one sequence), so that micro-batch losses add up to the batch loss."""
        import torch

        from forge_cli.train.algos import token_loss_weights

        width = max(len(s.loss_mask) for s in samples)
        mask = torch.zeros((len(samples), width))
        for row, sample in enumerate(samples):
            mask[row, :len(sample.loss_mask)] = torch.tensor(sample.loss_mask, dtype=torch.float32)
        weights = token_loss_weights(mask, self.algo.loss_agg_mode, [s.rollout_id for s in samples])
        return {id(s): weights[row] for row, s in enumerate(samples)}

    def train_step(self, samples: list[Sample]) -> dict[str, float]:
        """``trainer.ppo_epochs`` passes over the step's samples, each pass split into ``trainer.ppo_mini_batches``
        mini-batches of whole groups (``mini_batches``), one AdamW step per mini-batch. PPO's ratio is taken against
        the policy that generated the batch: with TIS, the trainer's own logprobs under the weights at the start of
        the step (when there is more than one update: kept from the first mini-batch's first pass, recomputed for the
        others before the first update), each token's loss weighted by ``min(pi_old / pi_rollout, tis_cap)``; without
        TIS, against the rollout engine's logprobs (veRL's bypass mode). The trainer-vs-rollout mismatch is measured
        under the start-of-step weights."""
        started = time.monotonic()
        parts = mini_batches(samples, self.trainer.ppo_mini_batches)
        updates = self.trainer.ppo_epochs * len(parts)
        old: dict[int, list[float]] | None = None
        if updates > 1 and self.algo.tis_cap is not None:
            # the first mini-batch's come from its first forward pass, before any update; the others' need one pass
            old = self._start_logprobs([s for part in parts[1:] for s in part])
        totals = _Totals()
        for epoch in range(self.trainer.ppo_epochs):
            for part in parts:
                self._update(part, old, totals, measure=epoch == 0)
        self.steps += 1
        seconds = time.monotonic() - started
        deltas, ratios = totals.deltas or [0.0], totals.ratios or [1.0]
        # tokens trained counts each sampled token once, however many passes went over it
        tokens = totals.tokens / self.trainer.ppo_epochs
        return {"loss": totals.loss / updates, "grad_norm": totals.grad_norm / updates, "train_tokens": tokens,
                "train_tokens_per_s": tokens / seconds if seconds > 0 else 0.0, "train_s": seconds,
                "logprob_abs_delta_mean": sum(deltas) / len(deltas), "logprob_abs_delta_max": max(deltas),
                "importance_ratio_mean": sum(ratios) / len(ratios), "importance_ratio_max": max(ratios),
                "clip_fraction": totals.clip / max(totals.tokens, 1), "samples": float(len(samples)),
                "optimizer_steps": float(updates)}

    def _start_logprobs(self, samples: list[Sample]) -> dict[int, list[float]]:
        """Each sample's response logprobs under the current weights (no gradient): PPO's old policy for a step
        with several updates."""
        import torch

        out: dict[int, list[float]] = {}
        with torch.no_grad():
            for batch in pack(samples, self.trainer.micro_batch_tokens, share=self.sharing(grad=False)):
                logprobs, _ = self.logprobs(batch)
                for row, sample in enumerate(batch):
                    out[id(sample)] = logprobs[row, :len(sample.response_ids)].tolist()
        return out

    def _update(self, samples: list[Sample], old: dict[int, list[float]] | None, totals: _Totals,
                measure: bool) -> None:
        """One AdamW step on ``samples``: micro-batches of at most ``trainer.micro_batch_tokens``, their losses
        weighted (``batch_weights``) so that the accumulated gradient is the loss of ``samples`` as one batch."""
        import torch

        from forge_cli.train.algos import PolicyLossConfig, get_policy_loss_fn, kl_penalty, tis_weights

        weights = self.batch_weights(samples)
        policy_loss = get_policy_loss_fn(self.algo.policy_loss)  # vanilla: PPO-clip, clip-higher, dual clip
        config = PolicyLossConfig(clip_ratio=self.algo.clip_ratio_low, clip_ratio_low=self.algo.clip_ratio_low,
                                  clip_ratio_high=self.algo.clip_ratio_high, clip_ratio_c=self.algo.clip_ratio_c)
        self.optimizer.zero_grad(set_to_none=True)
        for batch in pack(samples, self.trainer.micro_batch_tokens, share=self.sharing(grad=True)):
            logprobs, mask = self.logprobs(batch)
            rollout = _padded([s.rollout_logprobs for s in batch], logprobs.shape[1], self.device)
            if old is not None and id(batch[0]) in old:
                start = _padded([old[id(s)] for s in batch], logprobs.shape[1], self.device)
            else:
                start = logprobs.detach()  # before this step's first update
                if old is not None:
                    old.update({id(s): start[row, :len(s.response_ids)].tolist() for row, s in enumerate(batch)})
            advantages = torch.tensor([s.advantage for s in batch], device=self.device)[:, None].expand_as(logprobs)
            w = torch.zeros_like(mask)
            for row, sample in enumerate(batch):
                w[row, :len(sample.loss_mask)] = weights[id(sample)][:len(sample.loss_mask)]
            tis = tis_weights(start, rollout, mask, self.algo.tis_cap)
            # with TIS the ratio is taken against the trainer's own start-of-step logprobs and the engine mismatch
            # is corrected by the capped weight; without it, against the rollout engine's (veRL's bypass mode)
            reference = start if tis is not None else rollout
            loss, info = policy_loss(reference, logprobs, advantages, mask, config=config, rollout_is_weights=tis,
                                     loss_weights=w)
            if self.algo.kl_coef > 0:
                loss = loss + self.algo.kl_coef * (kl_penalty(logprobs, self.reference_logprobs(batch),
                                                              self.algo.kl_penalty) * w * mask).sum()
            loss.backward()
            n = int(mask.sum())
            totals.loss += float(loss.detach())
            totals.tokens += n
            totals.clip += info["actor/pg_clipfrac"] * n
            if measure:
                with torch.no_grad():
                    totals.deltas.extend((start - rollout).abs()[mask > 0].tolist())
                    totals.ratios.extend(torch.exp(start - rollout)[mask > 0].tolist())
        norm = torch.nn.utils.clip_grad_norm_([p for p in self.model.parameters() if p.requires_grad],
                                              self.trainer.max_grad_norm)
        totals.grad_norm += float(norm)
        self.optimizer.step()

    def reference_logprobs(self, batch: list[Sample]) -> torch.Tensor:
        """Logprobs of the batch's response tokens under the frozen initial weights (KL to a reference); with
        LoRA, the base model: the same module with its adapter disabled."""
        import torch

        if self.trainer.lora is not None:
            with torch.no_grad(), self.model.disable_adapter():
                return self.logprobs(batch)[0]
        if self.reference is None:
            model: Any = load_model(self.model_dir)
            self.reference = model.to(self.device).eval()
            if self.bf16:
                _float32_head(self.reference)
        policy, self.model = self.model, self.reference
        try:
            with torch.no_grad():
                return self.logprobs(batch)[0]
        finally:
            self.model = policy

    # ------------------------------------------------------------------ checkpoints
    def export_weights(self, directory: Path) -> Path:
        """The full weights and config, or with LoRA the adapter (adapter_config.json naming the base directory,
        adapter_model.safetensors); the tokenizer and chat template beside them either way."""
        directory.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(directory, safe_serialization=True)
        for name in MODEL_FILES:
            if (self.model_dir / name).is_file():
                shutil.copy2(self.model_dir / name, directory / name)
        return directory

    def save(self, directory: Path) -> None:
        import random

        import torch

        self.export_weights(directory)
        torch.save({"optimizer": self.optimizer.state_dict(), "steps": self.steps,
                    "torch_rng": torch.get_rng_state(), "python_rng": random.getstate()}, directory / STATE_FILE)

    def load(self, directory: Path) -> None:
        import random

        import torch

        from forge_cli.serve.adapter import is_adapter_dir

        if is_adapter_dir(directory) != (self.trainer.lora is not None):
            held, wanted = (("a LoRA adapter", "full weights (trainer.lora is null)") if is_adapter_dir(directory)
                            else ("full weights", "a LoRA adapter (trainer.lora is set)"))
            raise UserError(f"checkpoint {directory} holds {held}; this run trains {wanted}",
                            fix="resume with the trainer.lora setting the run was started with", exit_code=2)
        self.model = self._build(directory)
        self._prepare_model()
        self.optimizer = self._optimizer()
        state: dict[str, Any] = torch.load(directory / STATE_FILE, weights_only=False)
        self.optimizer.load_state_dict(state["optimizer"])
        self.steps = int(state["steps"])
        torch.set_rng_state(state["torch_rng"])
        random.setstate(state["python_rng"])


def _float32_head(model: Any) -> None:
    """Run the output projection (hidden state -> vocabulary logits) outside autocast, in float32: bf16 logits of
    magnitude 16-32 are quantized to steps of 0.125, which would put that much noise into every token's logprob
    (measured: 0.09 max |delta| between two passes over the same tokens, against < 1e-4 with this)."""
    import torch

    head = model.get_output_embeddings()
    forward = head.forward

    def float32_forward(hidden: torch.Tensor) -> torch.Tensor:
        with torch.autocast(hidden.device.type, enabled=False):
            return forward(hidden.float())

    head.forward = float32_forward


def uses_bf16(precision: str, device: str) -> bool:
    """Does ``trainer.precision`` on ``device`` ("cpu" or "cuda") mean bf16 autocast? ``auto``: on a GPU that
    supports bf16, or a CPU with native bf16 (emulated bf16 on AVX2-only CPUs is slower than float32)."""
    if precision != "auto":
        return precision == "bf16"
    if device == "cuda":
        import torch

        return bool(torch.cuda.is_bf16_supported())
    from forge_cli.serve.server import cpu_has_native_bf16

    return cpu_has_native_bf16()


def _padded(rows: list[list[float]], width: int, device: Any) -> torch.Tensor:
    import torch

    out = torch.zeros((len(rows), width), device=device)
    for i, row in enumerate(rows):
        values = [0.0 if (isinstance(v, float) and math.isnan(v)) else v for v in row]
        out[i, :len(values)] = torch.tensor(values, dtype=torch.float32)
    return out


def iter_checkpoints(root: Path) -> Iterator[Path]:
    """Checkpoint directories ``step-N`` under ``root``, oldest first."""
    if root.is_dir():
        yield from sorted((p for p in root.iterdir() if p.name.startswith("step-") and (p / STATE_FILE).is_file()),
                          key=lambda p: int(p.name.split("-", 1)[1]))
