"""Does branching at failures teach error recovery better than whole rollouts, for the same sampled tokens? Pass@1
on the recovery suite's unseen templates after training with ``algo.branch_at=first-failure`` against training
without it, both arms stopped at the same budget of completion tokens sampled (vLLM's own counters), with a control.

    .venv/bin/python benchmarks/recovery.py [--repeats 2] [--budget 30000] [--trials 2] [--test-per-template 3]
        [--branch-n 4] [--branch-rollouts 2] [--init CKPT] [--split test] [--output-dir runs/recovery]
        [--json FILE] [recipe options as benchmarks/learning.py's] [-- OVERRIDES]

Each repeat r draws its own task instances (``env.options.seed = seed + 1000 r``) and training seed (``run.seed =
seed + r``) and runs six forge commands on ``+env=recovery`` (react unless OVERRIDES say otherwise; ``runtime=docker``
isolates the sandboxes):

1. ``forge eval`` of the starting policy (the default model, or ``--init``) on ``--split`` ("before");
2. ``forge train`` without branching ("plain") and 3. with ``algo.branch_at=first-failure`` ("branch"), both with
   ``trainer.max_sampled_tokens=--budget`` (a run stops after the step in which its policy server has sampled that
   many completion tokens: whole-rollout groups, DAPO refills and branch continuations all count) and the same
   recipe, seed and train instances;
4. and 5. ``forge eval`` of each arm's last checkpoint on the same split, trials, temperature and instances;
6. the control: the starting policy evaluated again (the noise of evaluating the same weights twice).

Figures (``forge_cli/eval/effect.py``), per repeat and pooled: each arm's change from before, with a 95% paired
bootstrap interval resampling templates, net of the control; and **branch against plain** directly (the same tasks
after either training, branch - plain, same interval). The verdict reads that comparison on the unseen templates: a
win only when the interval's lower end is above 0. The budget table gives each arm's sampled tokens (vLLM's
``generation_tokens`` counter over its steps' rollouts), steps done, prefill tokens computed, and for the branch arm
the tokens its replays served from the recordings instead of sampling them again: the share of the budget branching
saved by not re-sampling prefixes is ``replayed / (sampled + replayed)``.

Resumable like benchmarks/learning.py (its ``Runner``): finished stages are reused, an unfinished run is continued
with ``--resume``; other options in the same output directory: exit 2. The JSON (``--json``, default
OUTPUT_DIR/recovery.json) holds every figure, run directory and wall time. Choose the recipe on ``--split val`` (the
suite's own unseen val templates); read ``test`` once per published figure.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from learning import SEED_STRIDE, Runner, Stage, check_options, effects, machine, pct, pts, table  # noqa: E402

from forge_cli.eval.effect import MEASURES, PairedTask, paired_effect, paired_rows  # noqa: E402
from forge_cli.train.metrics_log import step_rows  # noqa: E402

VERDICT_GROUP = "unseen"
ARMS = ("plain", "branch")


def say(message: str) -> None:
    print(f"[recovery] {message}", file=sys.stderr, flush=True)


def draw(args: argparse.Namespace, r: int) -> list[str]:
    return [f"env.options.seed={args.seed + SEED_STRIDE * r}", f"run.seed={args.seed + r}",
            f"env.options.{args.split}_per_template={args.eval_per_template}"]


def recipe(args: argparse.Namespace) -> list[str]:
    out = [f"algo={args.algo}", f"algo.group_size={args.group_size}", f"trainer.ppo_epochs={args.ppo_epochs}",
           f"trainer.ppo_mini_batches={args.ppo_mini_batches}", f"trainer.learning_rate={args.learning_rate}",
           f"trainer.tasks_per_step={args.tasks_per_step}", f"trainer.steps={args.max_steps}",
           f"trainer.max_sampled_tokens={args.budget}", f"rollout.sampling.temperature={args.temperature}",
           "trainer.gradient_checkpointing=false"]
    if args.algo == "dapo":
        out.append(f"algo.dynamic_sampling_max_rounds={args.refill_rounds}")
    return out


def arm_options(args: argparse.Namespace, arm: str) -> list[str]:
    if arm == "plain":
        return ["algo.branch_at=off"]
    return ["algo.branch_at=first-failure", f"algo.branch_n={args.branch_n}",
            f"algo.branch_rollouts={args.branch_rollouts}"]


def spent(stage: Stage) -> dict[str, Any]:
    """An arm's budget from its run's metrics.jsonl (each step once, its last line winning)."""
    rows = step_rows(stage.run_dir) if stage.run_dir is not None else {}

    def total(key: str) -> float:
        return sum(float(row.get(key) or 0.0) for row in rows.values())

    sampled, replayed = total("sampled_tokens"), total("branch_prefix_tokens_replayed")
    return {"steps": len(rows), "sampled_tokens": int(sampled), "prefill_tokens_computed":
            int(total("prefill_tokens_computed")), "prefix_tokens_replayed": int(replayed),
            "saved_share": round(replayed / (sampled + replayed), 4) if sampled + replayed else 0.0,
            "branch_groups": int(total("branch_groups")), "branch_rollouts": int(total("branch_rollouts")),
            "branch_prefix_faithful_mean": (round(sum(float(r["branch_prefix_faithful"]) for r in rows.values()
                                                      if "branch_prefix_faithful" in r)
                                                  / max(1, sum("branch_prefix_faithful" in r for r in rows.values())),
                                                  4)),
            "train_minutes": round(sum(float(row.get("step_s") or 0.0) for row in rows.values()) / 60, 1)}


def run_repeat(runner: Runner, args: argparse.Namespace, r: int) -> dict[str, Stage]:
    init = [f"model.path={args.init}"] if args.init else []
    evaluate = ["eval", "+env=recovery", f"env.split={args.split}", f"eval.trials={args.trials}",
                f"eval.temperature={args.eval_temperature}", *draw(args, r), *init]
    train = ["train", "+env=recovery", *recipe(args), *draw(args, r), *init]
    stages = {"before": runner.run(f"r{r}-before", evaluate[0], evaluate[1:], "eval.json")}
    for arm in ARMS:
        stages[f"train-{arm}"] = runner.run(f"r{r}-train-{arm}", train[0], [*train[1:], *arm_options(args, arm)],
                                            "summary.json")
        checkpoints = stages[f"train-{arm}"].summary.get("checkpoints") or []
        if not checkpoints:
            raise SystemExit(f"[recovery] training run {stages[f'train-{arm}'].run_dir} left no checkpoint")
        stages[f"after-{arm}"] = runner.run(f"r{r}-after-{arm}", evaluate[0],
                                            [*evaluate[1:], f"model.path={checkpoints[-1]}"], "eval.json")
    stages["control"] = runner.run(f"r{r}-control", evaluate[0], evaluate[1:], "eval.json")
    return stages


def budget_table(budgets: dict[str, dict[str, Any]]) -> None:
    print(f"  {'arm':8} {'steps':>5} {'sampled':>8} {'replayed':>8} {'saved':>6} {'prefill':>8} {'branches':>8} "
          f"{'faithful':>8} {'train min':>9}")
    for arm, b in budgets.items():
        print(f"  {arm:8} {b['steps']:>5} {b['sampled_tokens']:>8} {b['prefix_tokens_replayed']:>8} "
              f"{pct(b['saved_share']):>6} {b['prefill_tokens_computed']:>8} {b['branch_rollouts']:>8} "
              f"{pct(b['branch_prefix_faithful_mean']) if b['branch_rollouts'] else '-':>8} {b['train_minutes']:>9}")


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    extra: list[str] = []
    if "--" in argv:
        extra, argv = argv[argv.index("--") + 1:], argv[:argv.index("--")]
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2, help="independent (instances, training seed) draws")
    parser.add_argument("--budget", type=int, default=30000,
                        help="completion tokens each arm's policy server may sample (trainer.max_sampled_tokens)")
    parser.add_argument("--max-steps", type=int, default=20, help="steps at most, whatever the budget")
    parser.add_argument("--trials", type=int, default=2, help="trials per evaluated task")
    parser.add_argument("--eval-per-template", type=int, default=3,
                        help="instances per template in the evaluated split (env.options.<split>_per_template)")
    parser.add_argument("--branch-n", type=int, default=4, help="continuations per branched rollout")
    parser.add_argument("--branch-rollouts", type=int, default=2, help="rollouts branched per step at most")
    parser.add_argument("--learning-rate", type=float, default=3e-5)
    parser.add_argument("--tasks-per-step", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=0.7, help="sampling temperature of training rollouts")
    parser.add_argument("--algo", choices=("dapo", "grpo", "rloo"), default="dapo")
    parser.add_argument("--refill-rounds", type=int, default=2)
    parser.add_argument("--ppo-epochs", type=int, default=3)
    parser.add_argument("--ppo-mini-batches", type=int, default=2)
    parser.add_argument("--eval-temperature", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--split", default="test", choices=("test", "val"),
                        help="test for a published figure, val to choose a recipe (its own unseen templates)")
    parser.add_argument("--init", default=None, help="a checkpoint to start both arms (and before, control) from")
    parser.add_argument("--output-dir", type=Path, default=REPO / "runs" / "recovery")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if min(args.repeats, args.trials, args.budget, args.max_steps, args.eval_per_template, args.branch_n,
           args.branch_rollouts) < 1:
        parser.error("--repeats, --trials, --budget, --max-steps, --eval-per-template, --branch-n and "
                     "--branch-rollouts must be at least 1")
    if args.init and not Path(args.init).is_dir():
        parser.error(f"--init {args.init}: no such checkpoint directory")
    return args, extra


def measured(stages_of: list[dict[str, Stage]], measure: str) -> dict[str, Any]:
    """Per repeat and pooled: each arm before -> after (with the control), and branch against plain."""
    pooled: dict[str, list[PairedTask]] = {arm: [] for arm in ARMS}
    versus: list[PairedTask] = []
    per_repeat = []
    for r, stages in enumerate(stages_of):
        rows = {arm: paired_rows(stages["before"].run_dir, stages[f"after-{arm}"].run_dir,  # type: ignore[arg-type]
                                 stages["control"].run_dir, r, measure) for arm in ARMS}
        head = paired_rows(stages["after-plain"].run_dir, stages["after-branch"].run_dir,  # type: ignore[arg-type]
                           None, r, measure)
        for arm in ARMS:
            pooled[arm] += rows[arm]
        versus += head
        per_repeat.append({"effects": {arm: effects(rows[arm]) for arm in ARMS}, "branch_vs_plain": effects(head)})
    effect = paired_effect(versus, VERDICT_GROUP)
    return {"repeats": per_repeat, "pooled": {arm: effects(pooled[arm]) for arm in ARMS},
            "branch_vs_plain": effects(versus), "branching_wins": effect is not None and effect.low > 0,
            "tasks": {arm: [vars(row) | {"groups": list(row.groups)} for row in pooled[arm]] for arm in ARMS}}


def report(title: str, figures: dict[str, Any], args: argparse.Namespace) -> None:
    for r, rep in enumerate(figures["repeats"]):
        for arm in ARMS:
            table(f"{title}, repeat {r}, {arm}: before -> after (control: the starting policy again)",
                  rep["effects"][arm])
        table(f"{title}, repeat {r}: branch against plain ('before' is plain, 'after' is branch)",
              rep["branch_vs_plain"])
    for arm in ARMS:
        table(f"{title}, pooled over {args.repeats} repeat(s), {arm}: {args.trials} trials per {args.split} task",
              figures["pooled"][arm])
    table(f"{title}, pooled: branch against plain ('before' is plain, 'after' is branch)", figures["branch_vs_plain"])


def main() -> int:
    args, extra = parse(sys.argv[1:])
    options = check_options(args, extra, "recovery")
    runner = Runner(args.output_dir, extra, prefix="recovery")
    stages_of = [run_repeat(runner, args, r) for r in range(args.repeats)]
    figures = {measure: measured(stages_of, measure) for measure in MEASURES}
    repeats: list[dict[str, Any]] = [
        {"repeat": r, "draw": draw(args, r), "runs": {k: str(s.run_dir) for k, s in stages.items()},
         "wall_s": {k: round(s.wall_s) for k, s in stages.items()},
         "budget": {arm: spent(stages[f"train-{arm}"]) for arm in ARMS}} for r, stages in enumerate(stages_of)]
    report("pass@1", figures["pass@1"], args)
    report("mean score (partial credit)", figures["mean_score"], args)
    for rep in repeats:
        print(f"\nbudget, repeat {rep['repeat']} (each arm: {args.budget} sampled tokens, stopping after the step "
              "that reaches it)")
        budget_table(rep["budget"])
    budgets: dict[str, dict[str, Any]] = {arm: {k: sum(rep["budget"][arm][k] for rep in repeats) for k in
                     ("steps", "sampled_tokens", "prefill_tokens_computed", "prefix_tokens_replayed",
                      "branch_rollouts")} for arm in ARMS}
    for b in budgets.values():
        whole = b["sampled_tokens"] + b["prefix_tokens_replayed"]
        b["saved_share"] = round(b["prefix_tokens_replayed"] / max(1, whole), 4)
    print(f"  share of the branch arm's tokens that its replays served instead of sampling them again: "
          f"{pct(budgets['branch']['saved_share'])}")
    for measure, figure in figures.items():
        effect = (figure["branch_vs_plain"] or {}).get(VERDICT_GROUP)
        print(f"  verdict on {VERDICT_GROUP} templates, {measure} (branch - plain, lower end of the 95% interval > 0): "
              f"{'BRANCHING WINS' if figure['branching_wins'] else 'NO WIN SHOWN'}"
              + (f" ({pts(effect['delta'])} points, {pts(effect['low'])} .. {pts(effect['high'])})" if effect
                 else " (no task)"))
    out = args.json or args.output_dir / "recovery.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"options": options, "recipe": recipe(args), "arms": {a: arm_options(args, a) for a in
                                                                                     ARMS},
                               "machine": machine(), "verdict_group": VERDICT_GROUP,
                               "verdict_measure": "pass@1", "branching_wins": figures["pass@1"]["branching_wins"],
                               "budget": budgets, "repeats": repeats, "figures": figures}, indent=2) + "\n")
    say(f"figures written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
