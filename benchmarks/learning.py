"""Does `forge train` make the policy better on task types it never trained on? Pass@1 on the builtin suite's
held-out test split before and after training, with a control, over independent repeats; the verdict reads the
interval on unseen, non-guided templates.

    .venv/bin/python benchmarks/learning.py [--repeats 2] [--steps 10] [--trials 3] [--seed 0] [--split test]
        [--control eval|train|sft|none] [--output-dir runs/learning] [--json FILE] [recipe options] [--harness H]
        [--init CKPT | --sft [--sft-epochs 3 ...]] [-- OVERRIDES]

Each repeat r draws its own task instances (``env.options.seed = seed + 1000 r``) and its own training seed
(``run.seed = seed + r``) and runs four real forge commands on the default model and harness (react, builtin
tasks) unless OVERRIDES say otherwise (e.g. ``runtime=docker``, recommended: local sandboxes are not isolated):

1. ``forge eval`` of the base policy on ``--split`` (test), ``--trials`` trials per task ("before");
2. ``forge train`` for ``--steps`` steps on the ``train`` split of the same instances (no test instruction is a
   train instruction; the unseen templates have no train instance at all);
3. ``forge eval`` of the last checkpoint, same split, trials, temperature and seed ("after");
4. the control: ``--control eval`` (default) evaluates the base weights again (what a learning-rate-0 run leaves:
   tests/train/test_local_trainer.py checks they stay bit-identical); ``--control train`` trains at learning rate
   0 over the same steps and evaluates that; ``--control sft`` (SFT -> RL, with ``--init SFT_OUTPUT_DIR``) trains
   the SFT checkpoint further with ``forge sft`` on that benchmark's own SFT data and recipe for the RL run's wall
   time (``--max-minutes``) and evaluates it, and RL is compared with it directly (after - control, same
   interval); ``none`` skips it (and the verdict cannot be met).

The figures (``forge_cli/eval/effect.py``), per repeat and pooled over the repeats, for the groups ``overall``,
``seen`` (new instances of trained templates), ``unseen/guided`` and ``unseen/not guided``: pass@1 before, after and
in the control, the change with a 95% paired-bootstrap interval that resamples templates (a template's tasks in
every repeat drawn together), and the change net of the control, after - mean(before, control). The verdict
(pooled, on ``unseen/not guided``): met only when the interval's lower end exceeds +10 points and the net change is
at least +10 points.

The recipe (DAPO refilling groups without signal in up to two more rounds per step, three PPO epochs of two
mini-batches, learning rate 3e-5, 10 steps x 4 tasks x 4 rollouts at temperature 0.7) is the one earlier runs chose
on the previous suite's test split: it is kept as it was, not retuned here. Choose recipes with ``--split val``
(its own unseen templates, disjoint from test's); read ``test`` once per published figure.

**In a real harness** (issue 32): ``--harness pi`` runs every stage through that harness (``-- runtime=docker``).
``--sft`` measures base -> SFT instead of RL (``benchmarks/_sft_stages.py``): ``forge distill`` of the repeat's train
draw (``--sft-train-per-template`` instances per seen template) against the teacher stand-in
(``benchmarks/teacher_standin.py``, started here; it refuses val and test tasks, and the SFT data is asserted to share
no task, instruction or unseen template with them), ``forge sft`` on it (validation NLL on each template's last
train instance chooses the epoch), the chosen checkpoint evaluated; the control evaluates the base again. Its
verdict reads all unseen templates: met when the interval's lower end exceeds 0 (issue 32's hard point), with the
+10-point target beside it. ``--init CKPT`` starts the RL benchmark from a checkpoint; ``--init SFT_OUTPUT_DIR``
(SFT -> RL) starts repeat r from the checkpoint that SFT benchmark chose in its repeat r, and links that benchmark's
evaluation of it as "before" when split, trials, temperature, seed, harness and overrides are the same.

Resumable: every stage's run is ``OUTPUT_DIR/learning-r<R>-<stage>-<time>``; a finished one (``eval.json`` /
``summary.json``) is reused and an unfinished one continued (``forge eval|train --resume``) when the benchmark is
started again with the same options and output directory (other options there: exit 2; ``--repeats`` may grow, so
one repeat can run now and the next later). Progress goes to stderr as
it happens; the JSON (``--json``, default OUTPUT_DIR/learning.json) holds every figure, run directory and wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from forge_cli.eval.effect import PairedTask, paired_effect, paired_rows, verdict  # noqa: E402

TARGET = 0.10
VERDICT_GROUP = "unseen/not guided"
GROUPS = ("overall", "seen", "unseen", "unseen/guided", VERDICT_GROUP)
SEED_STRIDE = 1000  # env.options.seed of repeat r: seed + 1000 r (the suite's seeds of one base span < 200)


@dataclass
class Stage:
    """One forge command of the benchmark: its run directory (once known) and wall time."""

    name: str
    run_dir: Path | None = None
    wall_s: float = 0.0
    resumed: bool = False
    summary: dict[str, Any] = field(default_factory=dict)


class Runner:
    """Runs (or reuses, or continues) the stages in ``output_dir``."""

    def __init__(self, output_dir: Path, extra: list[str], prefix: str = "learning") -> None:
        self.output_dir, self.extra, self.prefix = output_dir, extra, prefix

    def say(self, message: str) -> None:
        print(f"[{self.prefix}] {message}", file=sys.stderr, flush=True)

    def _existing(self, name: str) -> list[Path]:
        return sorted(p for p in self.output_dir.glob(f"{self.prefix}-{name}-2*") if p.is_dir())

    def run(self, name: str, command: str, args: list[str], done_file: str, resumable: bool = True) -> Stage:
        """``forge COMMAND ARGS --json`` as stage ``name``, unless a finished run of it is there (an unfinished one
        is continued with ``--resume``, or started again when the command has none)."""
        stage = Stage(name)
        existing = self._existing(name)
        finished = [p for p in existing if (p / done_file).is_file()]
        if finished:
            stage.run_dir = finished[-1]
            stage.summary = json.loads((stage.run_dir / done_file).read_text())
            stage.wall_s = float(stage.summary.get("duration_s") or stage.summary.get("meta", {}).get("duration_s")
                                 or 0.0)
            self.say(f"{name}: reusing {stage.run_dir}")
            return stage
        if existing and resumable:
            cmd = [command, "--json", "--resume", str(existing[-1])]
            stage.resumed = True
        else:
            cmd = [command, "--json", *args, f"run.output_dir={self.output_dir}", f"run.name={self.prefix}-{name}",
                   *self.extra, "proxy.port=0"]  # any free port: nothing else on the machine is disturbed
        self.say(f"{name}: forge {' '.join(cmd)}")
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "forge_cli", *cmd], cwd=REPO, stdout=subprocess.PIPE, text=True)
        stage.wall_s = time.monotonic() - started
        if done.returncode != 0:
            where = f" (its run: {existing[-1] if existing else self.output_dir}/{self.prefix}-{name}-*)"
            raise SystemExit(f"[{self.prefix}] {name} failed with exit code {done.returncode}{where}; start the "
                             "benchmark again with the same options to continue it")
        stage.summary = json.loads(done.stdout)
        stage.run_dir = Path(stage.summary.get("run_dir") or stage.summary["meta"]["run_dir"])
        self.say(f"{name}: {stage.wall_s / 60:.1f} min")
        return stage


def say(message: str) -> None:
    print(f"[learning] {message}", file=sys.stderr, flush=True)


def recipe(args: argparse.Namespace) -> list[str]:
    """The training recipe's overrides (the algorithm, its group size, updates per step, activation memory)."""
    out = [f"algo={args.algo}", f"algo.group_size={args.group_size}", f"trainer.ppo_epochs={args.ppo_epochs}",
           f"trainer.ppo_mini_batches={args.ppo_mini_batches}",
           f"trainer.gradient_checkpointing={str(args.gradient_checkpointing).lower()}"]
    if args.algo == "dapo":
        out.append(f"algo.dynamic_sampling_max_rounds={args.refill_rounds}")
    return out


def draw(args: argparse.Namespace, repeat: int) -> list[str]:
    """The overrides that make repeat ``repeat`` its own draw: task instances and training / sampling seed."""
    return [f"env.options.seed={args.seed + SEED_STRIDE * repeat}", f"run.seed={args.seed + repeat}"]


def harness(args: argparse.Namespace) -> list[str]:
    return [f"+harness={args.harness}"] if args.harness else []


def saved_options(output_dir: str | None) -> dict[str, Any]:
    """The options a learning benchmark's output directory was run with ({} when it is not one)."""
    saved = Path(output_dir or "") / "learning-options.json"
    return json.loads(saved.read_text()) if output_dir and saved.is_file() else {}  # type: ignore[no-any-return]


def sft_benchmark(args: argparse.Namespace) -> dict[str, Any] | None:
    """The options of the SFT benchmark ``--init`` names (its output directory), None when it names a checkpoint."""
    options = saved_options(args.init)
    if not options:
        return None
    if not options.get("sft"):
        raise SystemExit(f"[learning] --init {args.init} is a learning benchmark without --sft: give an SFT "
                         "benchmark's output directory or a checkpoint")
    return options


def init_checkpoint(args: argparse.Namespace, r: int) -> str | None:
    """The policy repeat ``r`` starts from: ``--init`` itself, or, when it names an SFT benchmark's output
    directory, the checkpoint that benchmark chose in its own repeat ``r`` (same draw: SFT -> RL per repeat)."""
    if sft_benchmark(args) is None:
        return args.init  # type: ignore[no-any-return]
    done = sorted(Path(args.init).glob(f"learning-r{r}-sft-2*/summary.json"))
    if not done:
        raise SystemExit(f"[learning] the SFT benchmark in {args.init} has no finished repeat {r}: continue it with "
                         f"--repeats {r + 1} first")
    return str(json.loads(done[-1].read_text())["best"])


def reuse_sft_evaluation(runner: Runner, args: argparse.Namespace, r: int) -> None:
    """SFT -> RL: the "before" stage evaluates the SFT checkpoint exactly as the SFT benchmark's "after" stage did
    (same split, trials, temperature, draw, harness and overrides): that finished run is linked, not repeated."""
    options = sft_benchmark(args)
    same = ("split", "trials", "eval_temperature", "seed", "harness", "overrides")
    if options is None or runner._existing(f"r{r}-before") or any(
            options.get(k) != (runner.extra if k == "overrides" else getattr(args, k)) for k in same):
        return
    done = sorted(p.parent for p in Path(args.init).glob(f"learning-r{r}-after-2*/eval.json"))
    if done:
        link = runner.output_dir / done[-1].name.replace(f"learning-r{r}-after-", f"learning-r{r}-before-", 1)
        link.symlink_to(done[-1].resolve(), target_is_directory=True)
        say(f"r{r}-before: the SFT benchmark's evaluation of the same checkpoint, {done[-1]} (linked)")


def run_repeat(runner: Runner, args: argparse.Namespace, r: int) -> dict[str, Stage]:
    start = init_checkpoint(args, r)
    init = [f"model.path={start}"] if start else []
    if start:
        reuse_sft_evaluation(runner, args, r)
    evaluate = ["eval", *harness(args), f"env.split={args.split}", f"eval.trials={args.trials}",
                f"eval.temperature={args.eval_temperature}", *draw(args, r), *init]
    if args.sft:
        return sft_repeat(runner, args, r, evaluate)
    train = ["train", *harness(args), f"trainer.steps={args.steps}", f"trainer.tasks_per_step={args.tasks_per_step}",
             *recipe(args), f"rollout.sampling.temperature={args.temperature}", *draw(args, r), *init,
             *args.train_override]

    def model(stage: Stage) -> list[str]:
        checkpoints = stage.summary.get("checkpoints") or []
        if not checkpoints:
            raise SystemExit(f"[learning] training run {stage.run_dir} left no checkpoint")
        return [f"model.path={checkpoints[-1]}"]

    stages = {"before": runner.run(f"r{r}-before", evaluate[0], evaluate[1:], "eval.json")}
    stages["train"] = runner.run(f"r{r}-train", train[0], [*train[1:], f"trainer.learning_rate={args.learning_rate}"],
                                 "summary.json")
    # a run resumed across starts: its own steps' times, not only the last start's (the control's budget and the
    # reported wall time)
    stages["train"].wall_s = max(stages["train"].wall_s, 60 * training_minutes(stages["train"]))
    stages["after"] = runner.run(f"r{r}-after", evaluate[0], [*evaluate[1:], *model(stages["train"])], "eval.json")
    if args.control == "train":
        stages["control-train"] = runner.run(f"r{r}-control-train", train[0], [*train[1:], "trainer.learning_rate=0"],
                                             "summary.json")
        stages["control"] = runner.run(f"r{r}-control", evaluate[0], [*evaluate[1:], *model(stages["control-train"])],
                                       "eval.json")
    elif args.control == "eval":
        stages["control"] = runner.run(f"r{r}-control", evaluate[0], evaluate[1:], "eval.json")
    elif args.control == "sft":  # SFT -> RL: the SFT checkpoint trained further with SFT for RL's wall time
        from _sft_stages import sft_further  # type: ignore[import-not-found]

        assert start is not None  # parse() requires --init SFT_OUTPUT_DIR
        stages["control-train"] = sft_further(runner, Path(args.init), r, start, stages["train"].wall_s / 60,
                                              draw(args, r))
        stages["control"] = runner.run(f"r{r}-control", evaluate[0],
                                       [*evaluate[1:], f"model.path={stages['control-train'].summary['best']}"],
                                       "eval.json")
    return stages


def training_minutes(stage: Stage) -> float:
    """The RL run's training time in minutes: the sum of its steps' own times (``step_s`` in metrics.jsonl: rollouts,
    update and weight sync, each step once), so that a run resumed across sessions counts every step and not only
    the last invocation's wall time (what ``stage.wall_s`` holds then); that wall time when no step recorded one."""
    from forge_cli.train.metrics_log import step_rows

    rows = step_rows(stage.run_dir) if stage.run_dir is not None else {}  # a step written again: its last line
    steps = {step: float(row["step_s"]) for step, row in rows.items() if isinstance(row.get("step_s"), int | float)}
    return sum(steps.values()) / 60 if steps else stage.wall_s / 60


def sft_repeat(runner: Runner, args: argparse.Namespace, r: int, evaluate: list[str]) -> dict[str, Stage]:
    """base -> SFT: teacher trajectories distilled and fine-tuned on, the base evaluated, the SFT checkpoint
    evaluated, the base evaluated again as the control (``benchmarks/_sft_stages.py``). The SFT stages come first so
    that the checkpoint exists early (other benchmarks, e.g. ``merge_report.py``, use it); no stage reads another's
    evaluation, so the order changes no figure."""
    from _sft_stages import distill_and_sft  # type: ignore[import-not-found]

    made = distill_and_sft(runner, args, r, draw(args, r), harness(args))
    stages = {"before": runner.run(f"r{r}-before", evaluate[0], evaluate[1:], "eval.json")}
    stages["distill"], stages["train"] = made["distill"], made["sft"]
    stages["train"].summary["sft_data"] = made["data"]
    stages["after"] = runner.run(f"r{r}-after", evaluate[0], [*evaluate[1:], f"model.path={made['checkpoint']}"],
                                 "eval.json")
    if args.control != "none":
        stages["control"] = runner.run(f"r{r}-control", evaluate[0], evaluate[1:], "eval.json")
    return stages


def effects(rows: list[PairedTask]) -> dict[str, Any]:
    out = {}
    for group in GROUPS:
        effect = paired_effect(rows, group)
        out[group] = effect.to_dict() if effect is not None else None
    return out


def pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def pts(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:+.1f}"


def table(title: str, figures: dict[str, Any]) -> None:
    print(f"\n{title}")
    print(f"  {'group':18} {'tasks':>5} {'tpl':>4} {'before':>7} {'after':>7} {'control':>7} "
          f"{'change (95% CI)':>24} {'net of control (95% CI)':>26}")
    for group, e in figures.items():
        if e is None:
            print(f"  {group:18} {'-':>5}")
            continue
        change = f"{pts(e['delta'])} ({pts(e['low'])} .. {pts(e['high'])})"
        net = "-" if e["net"] is None else f"{pts(e['net'])} ({pts(e['net_low'])} .. {pts(e['net_high'])})"
        print(f"  {group:18} {e['tasks']:>5} {e['templates']:>4} {pct(e['before']):>7} {pct(e['after']):>7} "
              f"{pct(e['control']):>7} {change:>24} {net:>26}")


def machine() -> dict[str, Any]:
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return {"cpus": os.cpu_count(), "avx512_bf16": "avx512_bf16" in flags, "amx": "amx_tile" in flags,
            "platform": platform.platform()}


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    extra: list[str] = []
    if "--" in argv:
        extra, argv = argv[argv.index("--") + 1:], argv[:argv.index("--")]
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2, help="independent (instances, training seed) draws")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--trials", type=int, default=3, help="trials per evaluated task")
    parser.add_argument("--learning-rate", type=float, default=3e-5)
    parser.add_argument("--tasks-per-step", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=0.7, help="sampling temperature of training rollouts")
    parser.add_argument("--algo", choices=("dapo", "grpo", "rloo"), default="dapo")
    parser.add_argument("--refill-rounds", type=int, default=2,
                        help="DAPO: extra generation rounds per step refilling groups whose rewards are all equal")
    parser.add_argument("--ppo-epochs", type=int, default=3, help="passes over each step's batch")
    parser.add_argument("--ppo-mini-batches", type=int, default=2, help="AdamW steps per pass")
    parser.add_argument("--gradient-checkpointing", action="store_true",
                        help="recompute activations in the backward pass (off here: the 135M model's fit)")
    parser.add_argument("--eval-temperature", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0, help="base of the repeats' instance and training seeds")
    parser.add_argument("--split", default="test", help="evaluated split: test for a published figure, val to "
                                                         "choose recipes (its own unseen templates)")
    parser.add_argument("--control", choices=("eval", "train", "sft", "none"), default="eval",
                        help="eval: the starting policy evaluated again; train: trained at learning rate 0; sft (with "
                        "--init SFT_OUTPUT_DIR): the SFT checkpoint trained further with SFT for the RL run's wall "
                        "time, compared with RL directly (after - control)")
    parser.add_argument("--train-override", action="append", default=[],
                        help="an extra override for the training runs only (repeatable)")
    parser.add_argument("--harness", default=None, help="the harness every stage runs in (e.g. pi; default: the "
                                                         "experiment's, react)")
    parser.add_argument("--init", default=None, help="the policy to start from, evaluated before, trained, and the "
                        "control: a checkpoint, or an SFT benchmark's output directory (repeat r starts from the "
                        "checkpoint that benchmark chose in its repeat r, and its evaluation of it is reused)")
    parser.add_argument("--sft", action="store_true", help="base -> SFT instead of RL: teacher trajectories of "
                        "the train split through the harness (the teacher stand-in), then forge sft")
    parser.add_argument("--sft-epochs", type=int, default=3, help="SFT epochs at most (stops when the validation "
                                                                  "NLL stops improving)")
    parser.add_argument("--sft-batch", type=int, default=4)
    parser.add_argument("--sft-learning-rate", type=float, default=5e-5)
    parser.add_argument("--sft-train-per-template", type=int, default=4,
                        help="train instances per seen template the teacher runs (the last one validates SFT)")
    parser.add_argument("--output-dir", type=Path, default=REPO / "runs" / "learning")
    parser.add_argument("--json", type=Path, default=None, help="where the figures go (OUTPUT_DIR/learning.json)")
    args = parser.parse_args(argv)
    if args.sft and (args.control == "train" or args.init):
        parser.error("--sft starts from the base policy and its control evaluates the base again: no --control "
                     "train, no --init")
    if args.control == "sft" and not saved_options(args.init).get("sft"):
        parser.error("--control sft trains the SFT checkpoint further on that SFT benchmark's data: give --init "
                     "SFT_OUTPUT_DIR (an SFT benchmark's output directory)")
    if args.repeats < 1 or args.trials < 1 or args.steps < 1:
        parser.error("--repeats, --trials and --steps must be at least 1")
    return args, extra


def check_options(args: argparse.Namespace, extra: list[str], name: str = "learning") -> dict[str, Any]:
    """The options this output directory's runs were made with (``NAME-options.json``, written on first use; others:
    exit 2). ``name``: the benchmark's (learning, recovery)."""
    # --repeats may grow between starts (run one repeat, then continue with --repeats 2)
    options = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k not in ("json", "repeats")}
    options["overrides"] = extra
    args.output_dir.mkdir(parents=True, exist_ok=True)
    saved = args.output_dir / f"{name}-options.json"
    if saved.is_file():
        before = json.loads(saved.read_text())
        if before != options:
            changed = sorted(k for k in set(before) | set(options) if before.get(k) != options.get(k))
            print(f"error: {args.output_dir} holds a {name} benchmark run with other options ({', '.join(changed)})"
                  f"\n  fix: use another --output-dir, or the same options to continue that run", file=sys.stderr)
            raise SystemExit(2)
    else:
        saved.write_text(json.dumps(options, indent=2) + "\n")
    return options


def main() -> int:
    args, extra = parse(sys.argv[1:])
    options = check_options(args, extra)
    runner = Runner(args.output_dir, extra)
    repeats: list[dict[str, Any]] = []
    pooled: list[PairedTask] = []
    versus: list[PairedTask] = []  # --control sft: after against the control directly
    for r in range(args.repeats):
        stages = run_repeat(runner, args, r)
        control = stages["control"].run_dir if "control" in stages else None
        rows = paired_rows(stages["before"].run_dir, stages["after"].run_dir, control, r)  # type: ignore[arg-type]
        pooled += rows
        if args.control == "sft":
            versus += paired_rows(control, stages["after"].run_dir, None, r)  # type: ignore[arg-type]
        wall = {name: round(s.wall_s) for name, s in stages.items()}
        main_wall = sum(stages[k].wall_s for k in ("before", "distill", "train", "after") if k in stages)
        repeats.append({"repeat": r, "draw": draw(args, r), "runs": {k: str(s.run_dir) for k, s in stages.items()},
                        "resumed": [k for k, s in stages.items() if s.resumed], "wall_s": wall,
                        "minutes_before_train_after": round(main_wall / 60, 1), "effects": effects(rows)})
        table(f"repeat {r} ({', '.join(draw(args, r))}; before + train + after {main_wall / 60:.1f} min)",
              repeats[-1]["effects"])
    figures = effects(pooled)
    # RL: the verdict reads unseen, not guided templates (target +10 points, lower end above it). base -> SFT
    # (issue 32's hard point): unseen templates, lower end of the interval above 0; the +10 points beside it
    group, target = ("unseen", 0.0) if args.sft else (VERDICT_GROUP, TARGET)
    result = verdict(paired_effect(pooled, group), target)
    what = (f"SFT: teacher stand-in through {args.harness or 'the default harness'}, "
            f"{args.sft_train_per_template} train instances per seen template, up to {args.sft_epochs} epochs of "
            f"batch {args.sft_batch} at lr {args.sft_learning_rate:g}" if args.sft else
            f"{args.steps} steps x {args.tasks_per_step} tasks x {args.group_size} rollouts")
    table(f"pooled over {args.repeats} repeat(s): {what}, {args.trials} trials per {args.split} task", figures)
    if not args.sft:
        print(f"  recipe: {' '.join(recipe(args) + args.train_override)}, lr {args.learning_rate:g}, temperature "
              f"{args.temperature} (eval {args.eval_temperature}), control: {args.control}")
    print(f"  verdict on {group} templates (target: lower end > +{100 * target:.0f} and net of the control "
          f">= +{100 * target:.0f} points): {'MET' if result.met else 'NOT MET'} ({result.reason})")
    if args.sft and figures.get("unseen"):
        ten = figures["unseen"]["delta"] >= TARGET and figures["unseen"]["low"] > 0
        print(f"  issue 32's item 6 target on unseen templates (>= +{100 * TARGET:.0f} points, lower end > 0): "
              f"{'MET' if ten else 'NOT MET'}")
    against = effects(versus) if versus else None
    if against:
        table("RL against the control (the SFT checkpoint trained further with SFT for the RL run's wall time): "
              "'before' is the control", against)
    if args.init and figures.get("seen") and figures.get("unseen"):
        seen, unseen = figures["seen"], figures["unseen"]
        seen_ok = seen["delta"] >= TARGET and seen["low"] > 0
        net_value = (against.get("unseen") or {}).get("delta") if against else unseen["net"]
        unseen_ok = net_value is not None and net_value >= 0
        print(f"  issue 32's item 6 targets from --init: seen >= +{100 * TARGET:.0f} points with the lower end > 0: "
              f"{'MET' if seen_ok else 'NOT MET'}; unseen net of the control >= 0: "
              f"{'MET' if unseen_ok else 'NOT MET'} ({pts(net_value)} points; control: {args.control})")
    out = args.json or args.output_dir / "learning.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"options": options, "recipe": recipe(args), "machine": machine(),
                               "target_points": 100 * target, "verdict_group": group, "harness": args.harness,
                               "verdict": result.to_dict(), "pooled": figures, "repeats": repeats,
                               "rl_against_control": against,
                               "tasks": [vars(row) | {"groups": list(row.groups)} for row in pooled]}, indent=2) + "\n")
    say(f"figures written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
