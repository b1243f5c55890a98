"""Training throughput of forge's local trainer next to a plain transformers loop, like for like, in alternating pairs.

Three configurations, each measured as baseline, forge, baseline, forge, ... (``--repeats`` pairs), every run in a
process of its own (its own peak RSS), the median of the pairs' forge / baseline ratios reported beside every pair's
(one pair's ratio moves by about +-10% between runs of the same code as the machine's state drifts):

- ``float32``: forge's ``LocalTrainer`` (``trainer.precision=float32``) vs the plain loop in float32;
- ``bf16``: forge with ``trainer.precision=bf16`` (autocast over float32 weights, the output projection in float32)
  vs the plain loop under the same bf16 autocast, its output projection in float32 too;
- ``lora``: forge with ``trainer.lora`` (rank ``--lora``, alpha 2x rank, forge's default targets: every attention and
  MLP projection) vs a plain peft LoRA of the same rank, alpha, dropout and targets.

Both sides take every setting from forge's one composed config (benchmarks/_trainer_sides.py): the same model,
gradient checkpointing (``--gradient-checkpointing``, applied to both; on by default, as ``trainer=local``), dtype and
autocast, micro-batch packing (forge's ``pack``, ``--micro-batch-tokens``), AdamW and its learning rate, weight decay
and gradient clipping, warm-up steps (untimed) and timed optimizer steps, over the same seeded synthetic batches
(prompt + response token ids; every other response has its middle third masked out, like a tool output inside a
merged segment). The baseline is a forward pass computing logits only at the response positions (as forge does), the
token-mean cross-entropy of the loss tokens, backward and an AdamW step; forge's step is ``LocalTrainer.train_step``
(logprob recompute, PPO-clip, TIS, per-token loss weights, mismatch metrics).

Tokens are counted both ways, for each side: loss tokens (response tokens with loss mask 1) per second and tokens
processed (prompt + response tokens through forward and backward, padding not counted) per second. Both sides process
the same tokens, so forge / baseline is one ratio of times. The machine's CPU features (AVX2, AVX-512, AVX512-BF16,
AMX) are printed and in the JSON, with the load average around every run (the machine may be shared).

Sizes: the defaults fit a 2-core AVX2 machine, where one float32 optimizer step over ~340 tokens takes ~20 s and the
whole benchmark ~25 minutes. Without AVX512-BF16 or AMX, bf16 is emulated, ~10x slower than float32 here, so
``--bf16-shape auto`` gives the bf16 configuration 1 timed step of 1 sample (prompt <= 64, response <= 32 tokens) on
such a CPU and the float32 shape where bf16 is native; ``same`` or ``STEPSxSAMPLESxPROMPTxRESPONSE`` choose it.
bf16 / float32 tokens/s is only like for like when both ran the same shape (said beside it).

    .venv/bin/python benchmarks/trainer.py [--configs float32,bf16,lora] [--repeats 3] [--steps 2] [--samples 2]
        [--prompt 160] [--response 64] [--bf16-shape auto|same|1x1x64x32] [--warmup 1] [--micro-batch-tokens 4096]
        [--lora 16] [--gradient-checkpointing on|off] [--json FILE]

Timing runs on a shared machine: ``flock /tmp/forge-cpu.lock .venv/bin/python benchmarks/trainer.py ...``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

SIDES = Path(__file__).resolve().with_name("_trainer_sides.py")
CONFIGS = ("float32", "bf16", "lora")
FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")


def machine() -> dict[str, Any]:
    """CPU model, cores and the vector features that decide bf16's speed (native with AVX512-BF16 or AMX)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        info = ""
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "")
    features = {flag: flag in flags for flag in FLAGS}
    return {"cpu": model or platform.processor(), "cores": os.cpu_count(), "features": features,
            "native_bf16": features["avx512_bf16"] or features["amx_bf16"]}


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One side of one configuration in a fresh process; its JSON figures."""
    out = subprocess.run([sys.executable, str(SIDES), json.dumps(spec)], capture_output=True, text=True, check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"{spec['config']} {spec['side']} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    figures: dict[str, Any] = json.loads(lines[-1])
    return figures


EMULATED_BF16_SHAPE = (1, 1, 64, 32)


def bf16_shape(value: str, native: bool, default: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    """``--bf16-shape``: (steps, samples, prompt, response) of the bf16 configuration."""
    if value == "same" or (value == "auto" and native):
        return default
    if value == "auto":
        return EMULATED_BF16_SHAPE
    parts = value.lower().split("x")
    if len(parts) != 4 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"--bf16-shape: {value!r} is not auto, same or STEPSxSAMPLESxPROMPTxRESPONSE (e.g. 1x1x64x32)")
    steps, samples, prompt, response = (int(p) for p in parts)
    return steps, samples, prompt, response


def spec_of(args: argparse.Namespace, config: str, native_bf16: bool) -> dict[str, Any]:
    shape = (args.steps, args.samples, args.prompt, args.response)
    if config == "bf16":
        shape = bf16_shape(args.bf16_shape, native_bf16, shape)
    return {"config": config, "steps": shape[0], "samples": shape[1], "prompt": shape[2], "response": shape[3],
            "warmup": args.warmup, "micro_batch_tokens": args.micro_batch_tokens,
            "gradient_checkpointing": args.gradient_checkpointing == "on", "lora": args.lora}


def run_configuration(args: argparse.Namespace, config: str, native_bf16: bool) -> dict[str, Any]:
    """``--repeats`` alternating pairs (baseline first in each), each pair's ratio and the median."""
    spec = spec_of(args, config, native_bf16)
    pairs = []
    for k in range(args.repeats):
        baseline = child({**spec, "side": "baseline"})
        forge = child({**spec, "side": "forge"})
        if (baseline["loss_tokens"], baseline["processed_tokens"]) != (forge["loss_tokens"], forge["processed_tokens"]):
            raise SystemExit(f"{config}: the sides processed different tokens: {baseline} vs {forge}")
        ratio = forge["loss_tokens_per_s"] / baseline["loss_tokens_per_s"]
        pairs.append({"baseline": baseline, "forge": forge, "ratio": ratio})
        print(f"[trainer] {config} pair {k + 1}/{args.repeats}: baseline {baseline['loss_tokens_per_s']:.1f}, forge "
              f"{forge['loss_tokens_per_s']:.1f} loss tokens/s ({ratio:.2f}x)", file=sys.stderr, flush=True)
    def median(side: str, key: str) -> float:
        return statistics.median(p[side][key] for p in pairs)
    return {"spec": spec, "settings": pairs[0]["forge"]["settings"], "pairs": pairs,
            "median_ratio": statistics.median(p["ratio"] for p in pairs),
            "median": {side: {key: median(side, key) for key in ("loss_tokens_per_s", "processed_tokens_per_s",
                                                                  "peak_rss_mb", "seconds")}
                       for side in ("baseline", "forge")}}


def report(result: dict[str, Any]) -> None:
    m = result["machine"]
    features = ", ".join(f"{flag} {'yes' if on else 'no'}" for flag, on in m["features"].items())
    print(f"{m['cpu']}, {m['cores']} cores: {features} (bf16 {'native' if m['native_bf16'] else 'emulated'})")
    a = result["args"]
    print(f"gradient checkpointing: {a['gradient_checkpointing']}, both sides; {a['repeats']} alternating pairs "
          f"(baseline, forge) per configuration, each run its own process; {a['warmup']} warm-up step(s) untimed")
    for config, run in result["configurations"].items():
        spec, s = run["spec"], run["settings"]
        lora = f", LoRA r={s['lora']['rank']} alpha={s['lora']['alpha']}" if s["lora"] else ""
        print(f"\n{config}: {spec['steps']} timed optimizer step(s) x {spec['samples']} samples "
              f"(prompt <= {spec['prompt']}, response <= {spec['response']}), "
              f"micro-batches <= {s['micro_batch_tokens']} tokens, precision {s['precision']}{lora}, "
              f"AdamW lr {s['learning_rate']:g} wd {s['weight_decay']:g}, clip {s['max_grad_norm']:g}")
        print(f"  {'pair':<8}{'side':<10}{'loss tok/s':>12}{'processed tok/s':>17}{'peak RSS MB':>13}"
              f"{'forge/base':>12}{'load 1-min':>14}")
        for k, pair in enumerate(run["pairs"]):
            for side in ("baseline", "forge"):
                r = pair[side]
                ratio = f"{pair['ratio']:.2f}x" if side == "forge" else ""
                load = "{:.1f} -> {:.1f}".format(*r["loadavg_1min"])
                print(f"  {k + 1 if side == 'baseline' else '':<8}{side:<10}{r['loss_tokens_per_s']:12.1f}"
                      f"{r['processed_tokens_per_s']:17.1f}{r['peak_rss_mb']:13.0f}{ratio:>12}{load:>14}")
        med = run["median"]
        print(f"  {'median':<8}{'baseline':<10}{med['baseline']['loss_tokens_per_s']:12.1f}"
              f"{med['baseline']['processed_tokens_per_s']:17.1f}{med['baseline']['peak_rss_mb']:13.0f}")
        print(f"  {'':<8}{'forge':<10}{med['forge']['loss_tokens_per_s']:12.1f}"
              f"{med['forge']['processed_tokens_per_s']:17.1f}{med['forge']['peak_rss_mb']:13.0f}"
              f"{run['median_ratio']:11.2f}x  (median of the pairs' ratios; target >= 0.9x)")
    cross = result["cross"]
    if "bf16_over_float32" in cross:
        c = cross["bf16_over_float32"]
        note = "same shape" if c["same_shape"] else "different shapes: indicative only"
        print(f"\nbf16 / float32 (median loss tokens/s): forge {c['forge']:.2f}x, baseline {c['baseline']:.2f}x "
              f"({note})")
    if "lora_over_full" in cross:
        c = cross["lora_over_full"]
        print(f"LoRA / full float32 (medians): forge {c['forge']:.2f}x loss tokens/s, {c['forge_rss']:.2f}x peak RSS; "
              f"baseline {c['baseline']:.2f}x, {c['baseline_rss']:.2f}x")
    load = "{:.1f} at the start, {:.1f} at the end".format(*m["loadavg_1min"])
    print(f"\nwall time {result['wall_s']:.0f} s; 1-minute load average {load} (the machine is shared)")


def cross_ratios(runs: dict[str, Any]) -> dict[str, Any]:
    """bf16 and LoRA against float32 full training, from each configuration's medians."""
    out: dict[str, Any] = {}
    if "float32" not in runs:
        return out
    full = runs["float32"]["median"]
    if "bf16" in runs:
        shape = ("steps", "samples", "prompt", "response")
        out["bf16_over_float32"] = {
            **{side: runs["bf16"]["median"][side]["loss_tokens_per_s"] / full[side]["loss_tokens_per_s"]
               for side in ("baseline", "forge")},
            "same_shape": all(runs["bf16"]["spec"][k] == runs["float32"]["spec"][k] for k in shape)}
    if "lora" in runs:
        lora = runs["lora"]["median"]
        sides = ("baseline", "forge")
        out["lora_over_full"] = {
            **{side: lora[side]["loss_tokens_per_s"] / full[side]["loss_tokens_per_s"] for side in sides},
            **{f"{side}_rss": lora[side]["peak_rss_mb"] / full[side]["peak_rss_mb"] for side in sides}}
    return out


class Help(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The docstring's layout kept, every option's default shown."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 1)[1].split("    .venv")[0],
                                     formatter_class=Help)
    parser.add_argument("--configs", default=",".join(CONFIGS),
                        help="comma-separated configurations to measure, in order")
    parser.add_argument("--repeats", type=int, default=3, help="alternating baseline/forge pairs per configuration")
    parser.add_argument("--steps", type=int, default=2, help="timed optimizer steps (float32, lora)")
    parser.add_argument("--samples", type=int, default=2, help="samples per step (float32, lora)")
    parser.add_argument("--prompt", type=int, default=160,
                        help="longest prompt in tokens (float32, lora; lengths drawn from half up)")
    parser.add_argument("--response", type=int, default=64, help="longest response in tokens (float32, lora)")
    parser.add_argument("--bf16-shape", default="auto", metavar="auto|same|SxNxPxR",
                        help="the bf16 configuration's timed steps x samples x prompt x response: auto = "
                        f"{'x'.join(map(str, EMULATED_BF16_SHAPE))} where bf16 is emulated (no AVX512-BF16/AMX), "
                        "the float32 shape where it is native")
    parser.add_argument("--warmup", type=int, default=1, help="untimed warm-up steps before the timed ones, each side")
    parser.add_argument("--micro-batch-tokens", type=int, default=4096, help="trainer.micro_batch_tokens, both sides")
    parser.add_argument("--lora", type=int, default=16, help="LoRA rank of the lora configuration (alpha 2x rank)")
    parser.add_argument("--gradient-checkpointing", choices=["on", "off"], default="on",
                        help="applied to both sides (default on, trainer=local's default)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write every pair's figures here")
    args = parser.parse_args()
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    if unknown := [c for c in configs if c not in CONFIGS]:
        parser.error(f"--configs: unknown {', '.join(unknown)} (choose from {', '.join(CONFIGS)})")
    counts = (args.repeats, args.steps, args.samples, args.prompt, args.response, args.lora)
    if min(counts) < 1 or args.warmup < 0:
        parser.error("--repeats, --steps, --samples, --prompt, --response and --lora must be at least 1, "
                     "--warmup at least 0")
    try:
        bf16_shape(args.bf16_shape, False, (1, 1, 1, 1))
    except ValueError as exc:
        parser.error(str(exc))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from forge_cli.serve.prepare import default_model_dir

    model_dir = default_model_dir()
    if not (model_dir / "config.json").is_file():
        print(f"the default model is not prepared ({model_dir}): scripts/setup.sh model", file=sys.stderr)
        return 1
    started, load, host = time.monotonic(), os.getloadavg()[0], machine()
    runs = {config: run_configuration(args, config, host["native_bf16"]) for config in configs}
    result = {"benchmark": "trainer", "machine": {**host, "loadavg_1min": [load, os.getloadavg()[0]]},
              "versions": {name: version(name) for name in ("torch", "transformers", "peft")}, "model": str(model_dir),
              "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "configurations": runs, "cross": cross_ratios(runs), "wall_s": time.monotonic() - started}
    report(result)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
