"""Does `forge train` make the policy better? Held-out pass rate before and after N training steps, with a control.

    .venv/bin/python benchmarks/learning.py [--steps 10] [--trials 3] [--learning-rate 3e-5] [--tasks-per-step 4]
        [--group-size 4] [--algo dapo] [--refill-rounds 2] [--ppo-epochs 3] [--ppo-mini-batches 2]
        [--gradient-checkpointing] [--temperature 0.7] [--eval-temperature 0.3] [--seed 0] [--control train|eval|none]
        [--output-dir runs/learning] [--json out.json] [-- OVERRIDES]

What it runs, each a real forge command on the default model and harness (react, builtin tasks) unless OVERRIDES
say otherwise (e.g. ``runtime=docker``, recommended: local sandboxes are not isolated):

1. ``forge eval`` of the base policy on the builtin ``test`` split, ``--trials`` trials per task ("before");
2. ``forge train`` for ``--steps`` steps on the ``train`` split (no test template instance is in it), with the
   recipe that moved the policy most here: DAPO refilling groups without signal in up to two more rounds per step,
   three PPO epochs of two mini-batches each (six AdamW steps per training step), learning rate 3e-5;
3. ``forge eval`` of the last checkpoint, same split, trials, temperature and seed ("after");
4. the control: ``forge train`` with learning rate 0 over the same steps and seed, then ``forge eval`` of its last
   checkpoint. Its weights equal the base's, so its change from "before" is the noise floor of the measurement
   (``--control eval`` evaluates the base weights again instead: the same weights, a third of the time).

Both evaluations use the same sampling settings (``--eval-temperature`` as ``eval.temperature``, enforced by the
capture proxy on every call) and seed; training samples at ``--temperature``. It prints pass@1 before and after
with the difference and its 95% paired-bootstrap interval over the test tasks (``forge_cli.eval.compare``), the
control's difference, the steps, and the wall time of 1-3 (the figure the target counts: >= +10 points within 60
minutes on a 2-core machine) and of the control.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from forge_cli.eval.compare import compare  # noqa: E402

TARGET_POINTS = 10.0
TARGET_MINUTES = 60.0


def forge(args: list[str], label: str) -> tuple[dict[str, Any], float]:
    """Run ``forge ARGS --json``; its JSON summary and wall time. Progress goes to stderr as it happens."""
    cmd = [sys.executable, "-m", "forge_cli", *args, "proxy.port=0"]  # any free port: nothing else is disturbed
    print(f"[learning] {label}: forge {' '.join(args)}", file=sys.stderr, flush=True)
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"[learning] {label} failed with exit code {done.returncode}")
    print(f"[learning] {label}: {wall:.0f} s", file=sys.stderr, flush=True)
    return json.loads(done.stdout), wall


def evaluate(name: str, model_path: str | None, args: argparse.Namespace, extra: list[str]) -> tuple[str, float]:
    # the default model's (CPU-sized) settings with the checkpoint's weights
    model = [f"model.path={model_path}"] if model_path else []
    report, wall = forge(["eval", "--json", f"env.split={args.split}", f"eval.trials={args.trials}",
                          f"eval.temperature={args.eval_temperature}", f"run.seed={args.seed}",
                          f"run.output_dir={args.output_dir}", f"run.name=learning-{name}", *model, *extra],
                         f"eval {name}")
    return str(report["meta"]["run_dir"]), wall


def train(name: str, learning_rate: float, args: argparse.Namespace, extra: list[str]) -> tuple[dict[str, Any], float]:
    return forge(["train", "--json", f"trainer.steps={args.steps}", f"trainer.tasks_per_step={args.tasks_per_step}",
                  *recipe(args), f"trainer.learning_rate={learning_rate}",
                  f"rollout.sampling.temperature={args.temperature}", f"run.seed={args.seed}",
                  f"run.output_dir={args.output_dir}", f"run.name=learning-{name}", *args.train_override, *extra],
                 f"train {name}")


def recipe(args: argparse.Namespace) -> list[str]:
    """The training recipe's overrides (the algorithm, its group size, updates per step, activation memory)."""
    out = [f"algo={args.algo}", f"algo.group_size={args.group_size}", f"trainer.ppo_epochs={args.ppo_epochs}",
           f"trainer.ppo_mini_batches={args.ppo_mini_batches}",
           f"trainer.gradient_checkpointing={str(args.gradient_checkpointing).lower()}"]
    if args.algo == "dapo":
        out.append(f"algo.dynamic_sampling_max_rounds={args.refill_rounds}")
    return out


def last_checkpoint(summary: dict[str, Any]) -> str:
    checkpoints = summary.get("checkpoints") or []
    if not checkpoints:
        raise SystemExit(f"[learning] training run {summary.get('run_dir')} left no checkpoint")
    return str(checkpoints[-1])


def pass_at_1(run_a: str, run_b: str) -> dict[str, Any]:
    diff = compare(Path(run_a), Path(run_b)).overall.metrics["pass@1"]
    return {"before": diff.a, "after": diff.b, "delta": diff.delta, "low": diff.low, "high": diff.high,
            "tasks": diff.n}


def points(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:+.1f}"


def pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def main() -> int:
    argv = sys.argv[1:]
    extra: list[str] = []
    if "--" in argv:
        extra, argv = argv[argv.index("--") + 1:], argv[:argv.index("--")]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--trials", type=int, default=3, help="trials per test task (at least 3 for the target)")
    parser.add_argument("--learning-rate", type=float, default=3e-5)
    parser.add_argument("--tasks-per-step", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=0.7, help="sampling temperature of training rollouts")
    parser.add_argument("--algo", choices=("dapo", "grpo", "rloo"), default="dapo",
                        help="the training algorithm (configs/algo/)")
    parser.add_argument("--refill-rounds", type=int, default=2,
                        help="DAPO: extra generation rounds per step refilling groups whose rewards are all equal")
    parser.add_argument("--ppo-epochs", type=int, default=3, help="passes over each step's batch")
    parser.add_argument("--ppo-mini-batches", type=int, default=2,
                        help="AdamW steps per pass (mini-batches of whole groups)")
    parser.add_argument("--gradient-checkpointing", action="store_true",
                        help="recompute activations in the backward pass (less memory, ~30%% slower; off here: the "
                             "135M model's activations fit)")
    parser.add_argument("--eval-temperature", type=float, default=0.3,
                        help="sampling temperature of both evaluations (the builtin suite is calibrated at 0.3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--split", default="test", help="held-out split evaluated before and after")
    parser.add_argument("--control", choices=("train", "eval", "none"), default="train",
                        help="train: forge train with learning rate 0 over the same steps, then evaluate its last "
                             "checkpoint; eval: evaluate the base weights again (what an lr-0 run leaves: "
                             "tests/train/test_local_trainer.py checks they stay bit-identical), a third of the time; "
                             "none: skip")
    parser.add_argument("--train-override", action="append", default=[],
                        help="an extra override for the training runs only (repeatable)")
    parser.add_argument("--before", default=None, metavar="RUN_DIR",
                        help="reuse this finished 'before' evaluation (continuing an interrupted benchmark)")
    parser.add_argument("--trained", default=None, metavar="RUN_DIR",
                        help="reuse this finished training run (continuing an interrupted benchmark)")
    parser.add_argument("--after", default=None, metavar="RUN_DIR",
                        help="reuse this finished 'after' evaluation (continuing an interrupted benchmark)")
    parser.add_argument("--output-dir", default=str(REPO / "runs" / "learning"))
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args(argv)

    if args.before:
        before = args.before
        before_s = float(json.loads((Path(before) / "eval.json").read_text())["meta"]["duration_s"])
    else:
        before, before_s = evaluate("before", None, args, extra)
    if args.trained:
        trained = json.loads((Path(args.trained) / "summary.json").read_text())
        train_s = float(trained["duration_s"])
    else:
        trained, train_s = train("trained", args.learning_rate, args, extra)
    if args.after:
        after = args.after
        after_s = float(json.loads((Path(after) / "eval.json").read_text())["meta"]["duration_s"])
    else:
        after, after_s = evaluate("after", last_checkpoint(trained), args, extra)
    wall_s = before_s + train_s + after_s
    result: dict[str, Any] = {
        "steps": args.steps, "learning_rate": args.learning_rate, "tasks_per_step": args.tasks_per_step,
        "group_size": args.group_size, "temperature": args.temperature,
        "eval_temperature": args.eval_temperature, "trials": args.trials, "seed": args.seed,
        "recipe": recipe(args), "train_override": args.train_override, "extra": extra,
        "runs": {"before": before, "train": trained["run_dir"], "after": after},
        "pass_at_1": pass_at_1(before, after),
        "wall_s": {"before_eval": round(before_s), "train": round(train_s), "after_eval": round(after_s),
                   "total": round(wall_s)},
    }
    if args.control != "none":
        c_started = time.monotonic()
        if args.control == "train":
            control, _ = train("control", 0.0, args, extra)
            control_after, _ = evaluate("control-after", last_checkpoint(control), args, extra)
            result["runs"]["control_train"] = control["run_dir"]
        else:
            control_after, _ = evaluate("control-after", None, args, extra)
        result["runs"]["control_after"] = control_after
        result["control"] = args.control
        result["control_pass_at_1"] = pass_at_1(before, control_after)
        result["wall_s"]["control"] = round(time.monotonic() - c_started)

    p = result["pass_at_1"]
    print(f"\nlearning benchmark: {args.steps} steps x {args.tasks_per_step} tasks x {args.group_size} rollouts, "
          f"lr {args.learning_rate:g}, temperature {args.temperature} (eval {args.eval_temperature}), "
          f"{args.trials} trials x {p['tasks']} "
          f"{args.split} tasks, seed {args.seed}")
    print(f"  training recipe: {' '.join(recipe(args) + args.train_override)}")
    print(f"  held-out pass@1: before {pct(p['before'])}, after {pct(p['after'])}: {points(p['delta'])} points "
          f"(95% CI {points(p['low'])} .. {points(p['high'])})")
    if "control_pass_at_1" in result:
        c = result["control_pass_at_1"]
        how = "learning rate 0, same steps" if args.control == "train" else "the base weights evaluated again"
        print(f"  control ({how}): {pct(c['after'])}: {points(c['delta'])} points "
              f"(95% CI {points(c['low'])} .. {points(c['high'])})  <- the noise floor")
    minutes = wall_s / 60
    print(f"  wall time (both evaluations included): {minutes:.1f} min (before eval {before_s / 60:.1f}, train "
          f"{train_s / 60:.1f}, after eval {after_s / 60:.1f})")
    gained = (p["delta"] or 0.0) * 100
    print(f"  target: >= +{TARGET_POINTS:.0f} points within {TARGET_MINUTES:.0f} min: "
          + ("MET" if gained >= TARGET_POINTS and minutes <= TARGET_MINUTES else "NOT MET")
          + f" ({gained:+.1f} points in {minutes:.1f} min)")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
