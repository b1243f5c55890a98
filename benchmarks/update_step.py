"""One update step of the local trainer on a recorded harness batch (a group of rollouts of one task), the way it
ran before shared prefixes and the way it runs now, in alternating pairs in one process; tokens processed, loss
tokens and model FLOP utilisation against this machine's matmul peak in the same dtype, measured in the same run.

    .venv/bin/python benchmarks/update_step.py --run RUN_DIR [--group 4] [--pairs 3] [--precision auto]
        [--micro-batch-tokens 4096] [--json FILE]

RUN_DIR is any rollout run with at least ``--group`` finished rollouts of one task (e.g. ``forge rollout +harness=pi
model.path=SFT_CHECKPOINT rollout.samples_per_task=4 env.split=train rollout.max_tasks=1 runtime=docker``): the first
such task's rollouts become the batch (``build_batch``: segments, loss masks, GRPO advantages; a group whose rewards
are all equal gets advantages +-1 so that the step has a gradient: the work is the same).

Three sides, each a ``LocalTrainer`` on the run's model with the same batch, learning rate 1e-7 (the weights stay
put between pairs), one PPO epoch:

- ``default-before``: ``trainer.gradient_checkpointing=true``, ``share_prefix=false`` (the defaults before shared
  prefixes);
- ``unshared``: no gradient checkpointing, ``share_prefix=false``;
- ``shared``: no gradient checkpointing, ``share_prefix=true`` (every micro-batch's common prefix computed once).

Tokens processed count a prefix shared by several sequences once (the size of the token trie of the batch's
sequences); the FLOPs of a step are 6 x parameters x tokens processed (forward and backward), and MFU is that over
the step's time against the peak measured here: a 2048^3 matmul in the trainer's dtype with torch's threads.
Timing on a shared machine: ``flock /tmp/forge-cpu.lock .venv/bin/python benchmarks/update_step.py ...``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SIDES = {"default-before": ["trainer.gradient_checkpointing=true", "trainer.share_prefix=false"],
         "unshared": ["trainer.gradient_checkpointing=false", "trainer.share_prefix=false"],
         "shared": ["trainer.gradient_checkpointing=false", "trainer.share_prefix=true"]}


def trie_tokens(sequences: list[list[int]]) -> int:
    """Tokens of the batch with every shared prefix counted once (nodes of the sequences' token trie)."""
    from forge_cli.train.prefix import common_prefix

    ordered = sorted(sequences)
    return sum(len(s) - (common_prefix(s, ordered[i - 1]) if i else 0) for i, s in enumerate(ordered))


def matmul_peak(bf16: bool, size: int = 2048, repeats: int = 5) -> float:
    """FLOP/s of a size^3 matmul in the trainer's dtype (best of ``repeats``)."""
    import torch

    dtype = torch.bfloat16 if bf16 else torch.float32
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - started)
    return 2 * size ** 3 / best


def recorded_group(run_dir: Path, group: int, max_seq_len: int) -> tuple[list[Any], str, Path]:
    """The samples of the first task with ``group`` finished rollouts, and the run's model directory."""
    from forge_cli.rollout.reader import read_run
    from forge_cli.serve.tokenizer import model_dir_of_run
    from forge_cli.train.samples import SamplePolicy, build_batch

    by_task: dict[str, list[Any]] = {}
    for rollout in read_run(run_dir):
        if rollout.result.status == "ok" and rollout.calls:
            by_task.setdefault(rollout.result.task_id, []).append(rollout)
    task = next((t for t, rs in by_task.items() if len(rs) >= group), None)
    if task is None:
        raise SystemExit(f"error: {run_dir} has no task with {group} finished rollouts "
                         f"(most: {max((len(v) for v in by_task.values()), default=0)})")
    batch = build_batch(by_task[task][:group], SamplePolicy(max_seq_len=max_seq_len))
    samples = batch.samples
    if all(s.advantage == 0 for s in samples):
        for n, sample in enumerate(samples):
            sample.advantage = 1.0 if n % 2 == 0 else -1.0
    model_dir = model_dir_of_run(run_dir)
    if model_dir is None:
        raise SystemExit(f"error: cannot tell the model of {run_dir}")
    return samples, task, model_dir


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="a rollout run directory")
    parser.add_argument("--group", type=int, default=4, help="rollouts of one task in the batch")
    parser.add_argument("--pairs", type=int, default=3, help="rounds of the three sides, alternating")
    parser.add_argument("--precision", default="auto", choices=("auto", "bf16", "float32"))
    parser.add_argument("--micro-batch-tokens", type=int, default=4096)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if not (args.run / "results.jsonl").is_file():
        print(f"error: {args.run} is not a rollout run directory (no results.jsonl)", file=sys.stderr)
        return 2
    import torch

    from forge_cli.config.compose import compose
    from forge_cli.train.local import LocalTrainer, pack

    samples, task, model_dir = recorded_group(args.run, args.group, 8192)
    base = ["trainer.learning_rate=1e-7", f"trainer.precision={args.precision}", "trainer.ppo_epochs=1",
            "trainer.ppo_mini_batches=1", f"trainer.micro_batch_tokens={args.micro_batch_tokens}"]
    trainers = {}
    for name, overrides in SIDES.items():
        exp = compose([*base, *overrides]).experiment
        trainers[name] = LocalTrainer(model_dir, exp.trainer, exp.algo)
    bf16 = trainers["shared"].bf16
    params = sum(p.numel() for p in trainers["shared"].model.parameters())
    processed = trie_tokens([s.input_ids for s in samples])
    computed = {name: sum(len(s.input_ids) for s in samples) for name in SIDES}
    computed["shared"] = sum(_shared(b) + sum(len(s.input_ids) - _shared(b) for s in b)
                             for b in pack(samples, args.micro_batch_tokens, share=True))
    peak = matmul_peak(bf16)
    print(f"task {task}: {len(samples)} samples from {args.group} rollouts, {sum(len(s.input_ids) for s in samples)} "
          f"tokens in all, {processed} with shared prefixes once, {sum(s.loss_tokens for s in samples)} loss tokens; "
          f"{'bf16' if bf16 else 'float32'} peak {peak / 1e9:.0f} GFLOP/s ({torch.get_num_threads()} threads)",
          file=sys.stderr)
    for trainer in trainers.values():  # warm-up step each, untimed
        trainer.train_step(samples)
    times: dict[str, list[float]] = {name: [] for name in SIDES}
    for pair in range(args.pairs):
        for name, trainer in trainers.items():
            started = time.perf_counter()
            trainer.train_step(samples)
            times[name].append(time.perf_counter() - started)
            print(f"pair {pair + 1}: {name} {times[name][-1]:.2f} s", file=sys.stderr)
    flops = 6 * params * processed
    sides = {name: {"step_s": statistics.median(t), "steps_s": t, "tokens_computed": computed[name],
                    "mfu": flops / statistics.median(t) / peak} for name, t in times.items()}
    before = sides["default-before"]["step_s"]
    print(f"\n  {'side':16} {'step (median)':>14} {'speed-up':>9} {'tokens computed':>16} {'MFU':>7}")
    for name, side in sides.items():
        print(f"  {name:16} {side['step_s']:>12.2f} s {before / side['step_s']:>8.2f}x {side['tokens_computed']:>16} "
              f"{100 * side['mfu']:>6.1f}%")
    print(f"  tokens processed (shared prefixes once): {processed}; loss tokens "
          f"{sum(s.loss_tokens for s in samples)}; FLOPs per step 6 x {params / 1e6:.0f}M x {processed}; peak "
          f"{peak / 1e9:.0f} GFLOP/s")
    result = {"run": str(args.run), "task": task, "samples": len(samples), "group": args.group,
              "tokens_processed": processed, "loss_tokens": sum(s.loss_tokens for s in samples), "params": params,
              "dtype": "bf16" if bf16 else "float32", "peak_flops": peak, "threads": torch.get_num_threads(),
              "cpus": os.cpu_count(), "sides": sides,
              "speedup_vs_default_before": before / sides["shared"]["step_s"]}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


def _shared(batch: list[Any]) -> int:
    from forge_cli.train.prefix import shared_length

    return shared_length(batch)


if __name__ == "__main__":
    sys.exit(main())
