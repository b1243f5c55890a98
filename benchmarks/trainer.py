"""Training throughput of forge's local trainer next to a plain transformers loop, on the same packed batches.

Both start from the default model (SmolLM2-135M, float32) and run the same number of optimizer steps over the same
synthetic batches (prompt + response token ids, half the response tokens rewarded): the baseline is a bare
forward + cross-entropy-style loss + backward + AdamW step per micro-batch, with no masks, no advantages and no
metrics; forge's is ``LocalTrainer.train_step`` (logprob recompute, PPO-clip, TIS, loss weights, mismatch metrics).
Printed: training tokens/s of each and forge's share of the baseline (target >= 0.9x). ``--bf16`` adds forge's
trainer with ``trainer.precision=bf16`` (autocast over float32 weights; ``auto`` picks it on CPUs with native bf16
and on GPUs). ``--lora R`` adds forge's
trainer with ``trainer.lora`` (rank R, alpha 2R, all attention and MLP projections) on the same batches. Each
configuration runs in a process of its own, so each one's peak resident memory (ru_maxrss) is printed beside it.
Baseline and forge run ``--repeats`` times, alternating (baseline, forge, baseline, forge, ...), and the ratio is the
median of the pairs': one pair's ratio moved by about +-10% between runs on the same code (the machine's state
drifts), which alternating pairs measure instead of hiding.

    .venv/bin/python benchmarks/trainer.py [--steps 3] [--samples 8] [--prompt 300] [--response 120] [--repeats 3]
        [--bf16] [--lora 16]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from forge_cli.config.compose import compose
from forge_cli.serve.prepare import default_model_dir
from forge_cli.train.local import LocalTrainer, pack
from forge_cli.train.sample import Sample


def batches(n_steps: int, n_samples: int, prompt: int, response: int, vocab: int) -> list[list[Sample]]:
    rng = random.Random(0)
    out = []
    for step in range(n_steps):
        samples = []
        for i in range(n_samples):
            p = rng.randint(prompt // 2, prompt)
            r = rng.randint(response // 2, response)
            samples.append(Sample(rollout_id=f"{step}-{i}", group_id=f"g{step}-{i // 4}", task_id="t", segment=0,
                                  prompt_ids=[rng.randrange(vocab) for _ in range(p)],
                                  response_ids=[rng.randrange(vocab) for _ in range(r)], loss_mask=[1] * r,
                                  rollout_logprobs=[-2.0] * r, reward=float(i % 2), advantage=1.0 if i % 2 else -1.0))
        out.append(samples)
    return out


def baseline(model_dir: Path, warm: list[list[Sample]], data: list[list[Sample]], micro_batch_tokens: int,
             lr: float) -> tuple[float, int]:
    """A plain transformers loop: same model, same packing, forward + token NLL on the response + backward + AdamW.
    The ``warm`` steps run first, untimed (first-call costs out of the measurement)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    tokens, started = 0, time.monotonic()
    for step, samples in enumerate(warm + data):
        if step == len(warm):
            tokens, started = 0, time.monotonic()
        optimizer.zero_grad(set_to_none=True)
        for micro in pack(samples, micro_batch_tokens):
            width = max(len(s.input_ids) for s in micro)
            ids = torch.zeros((len(micro), width), dtype=torch.long)
            labels = torch.full((len(micro), width), -100, dtype=torch.long)
            attention = torch.zeros((len(micro), width), dtype=torch.long)
            for row, s in enumerate(micro):
                ids[row, :len(s.input_ids)] = torch.tensor(s.input_ids)
                attention[row, :len(s.input_ids)] = 1
                labels[row, len(s.prompt_ids):len(s.input_ids)] = torch.tensor(s.response_ids)
            loss = model(input_ids=ids, attention_mask=attention, labels=labels).loss
            loss.backward()
            tokens += sum(s.loss_tokens for s in micro)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    return tokens / (time.monotonic() - started), tokens


def forge_trainer(model_dir: Path, warm: list[list[Sample]], data: list[list[Sample]], micro_batch_tokens: int,
                  lr: float, lora: int = 0, precision: str = "float32") -> tuple[float, int]:
    overrides = [f"trainer.micro_batch_tokens={micro_batch_tokens}", f"trainer.learning_rate={lr}",
                 f"trainer.precision={precision}"]
    overrides += [f"trainer.lora={{rank:{lora},alpha:{2 * lora}}}"] if lora else []
    exp = compose(overrides).experiment
    trainer = LocalTrainer(model_dir, exp.trainer, exp.algo)
    for samples in warm:
        trainer.train_step(samples)
    tokens, started = 0, time.monotonic()
    for samples in data:
        tokens += int(trainer.train_step(samples)["train_tokens"])
    return tokens / (time.monotonic() - started), tokens


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=300)
    parser.add_argument("--response", type=int, default=120)
    parser.add_argument("--micro-batch-tokens", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3, help="alternating baseline/forge pairs (median reported)")
    parser.add_argument("--lora", type=int, default=0, help="also measure trainer.lora with this rank (0: not)")
    parser.add_argument("--bf16", action="store_true",
                        help="also measure forge's trainer with trainer.precision=bf16 (autocast; float32 weights)")
    parser.add_argument("--only", choices=["baseline", "forge", "bf16", "lora"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    model_dir = default_model_dir()
    if not (model_dir / "config.json").is_file():
        print(f"the default model is not prepared ({model_dir}): scripts/setup.sh model", file=sys.stderr)
        return 1
    if args.only:
        return measure(args, model_dir)
    pairs = []
    for k in range(args.repeats):  # ~1-2 min a configuration on 2 cores: say each pair as it ends
        pair = (child("baseline"), child("forge"))
        pairs.append(pair)
        print(f"[trainer] pair {k + 1}/{args.repeats}: baseline {pair[0]['tokens_per_s']:.1f}, forge "
              f"{pair[1]['tokens_per_s']:.1f} tokens/s", file=sys.stderr, flush=True)
    ratios = sorted(f["tokens_per_s"] / b["tokens_per_s"] for b, f in pairs)
    middle = sorted(pairs, key=lambda pair: pair[1]["tokens_per_s"] / pair[0]["tokens_per_s"])[len(pairs) // 2]
    runs = {"baseline": middle[0], "forge": middle[1],
            **{name: child(name) for name in (*(["bf16"] if args.bf16 else []), *(["lora"] if args.lora else []))}}
    print(f"{args.steps} steps x {args.samples} samples (prompt <= {args.prompt}, response <= {args.response} tokens), "
          f"micro-batches of {args.micro_batch_tokens} tokens, float32 on CPU unless named")
    print(f"  forge / baseline per pair:   {', '.join(f'{r:.2f}x' for r in ratios)} ({args.repeats} alternating pairs; "
          "the median pair below)")
    labels = {"baseline": "plain transformers loop:", "forge": "forge local trainer:", "bf16": "forge trainer, bf16:",
              "lora": f"forge trainer, LoRA r={args.lora}:"}
    for name, run in runs.items():
        print(f"  {labels[name]:<28} {run['tokens_per_s']:8.1f} training tokens/s ({run['tokens']} tokens), "
              f"peak RSS {run['peak_rss_mb']:7.0f} MB")
    print(f"  forge / baseline (median):   {ratios[len(ratios) // 2]:8.2f}x   (target >= 0.9x)")
    if "bf16" in runs:
        print(f"  bf16 / float32 forge:        {runs['bf16']['tokens_per_s'] / runs['forge']['tokens_per_s']:8.2f}x")
    if "lora" in runs:
        print(f"  LoRA / full forge:           {runs['lora']['tokens_per_s'] / runs['forge']['tokens_per_s']:8.2f}x "
              f"tokens/s, {runs['lora']['peak_rss_mb'] / runs['forge']['peak_rss_mb']:.2f}x peak RSS")
    return 0


def child(name: str) -> dict[str, float]:
    """Run one configuration in a fresh process (its own peak RSS); its JSON figures."""
    out = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--only", name], capture_output=True, text=True,
                         check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"{name} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    figures: dict[str, float] = json.loads(lines[-1])
    return figures


def measure(args: argparse.Namespace, model_dir: Path) -> int:
    data = batches(args.steps + 1, args.samples, args.prompt, args.response, vocab=49152)
    warm, timed = data[:1], data[1:]
    if args.only == "baseline":
        tps, tokens = baseline(model_dir, warm, timed, args.micro_batch_tokens, 1e-6)
    else:
        lora = args.lora if args.only == "lora" else 0
        precision = "bf16" if args.only == "bf16" else "float32"
        tps, tokens = forge_trainer(model_dir, warm, timed, args.micro_batch_tokens, 1e-6, lora, precision)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(json.dumps({"tokens_per_s": tps, "tokens": tokens, "peak_rss_mb": peak_mb}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
