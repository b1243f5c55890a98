"""Do teacher trajectories reach reward 1 through each real harness? (issue 32, item 5)

    .venv/bin/python benchmarks/teacher_reach.py [--harnesses pi,mini-swe-agent,codex,openclaw,claude-code]
        [--per-template 1] [--seed 0] [--output-dir runs/teacher-reach] [--json FILE] [-- OVERRIDES]

For each harness, ``forge distill +harness=H`` runs the builtin suite's **train** split (``--per-template``
instances of each of the 32 seen templates, ``env.options.seed=--seed``) through the real harness, with every
model call served by the teacher stand-in (``benchmarks/teacher_standin.py``, started here on a free loopback
port: it answers train tasks with their reference solution through the harness's own shell-like tool and refuses
any val or test task), through the capture proxy, sandboxes (OVERRIDES, e.g. ``runtime=docker``) and verifiers as
in training. The figure per harness: the share of rollouts that reach reward 1, with a 95% bootstrap interval that
resamples templates, calls per rollout, the statuses of those that did not, and the wall time. A harness whose
bundle is not installed is reported as such (``scripts/setup.sh harnesses``), not as a score. Where ``forge distill``
fails after its rollouts ended (a record its SFT export cannot render: a failed call, an answer its wire format
cannot turn back into Chat Completions), the rollouts' rewards are still reported, with that failure beside them.

Resumable: each harness's distill run is ``OUTPUT_DIR/reach-<harness>-<time>``; a finished one (``distill.json``)
is reused when the benchmark is started again with the same output directory.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from _sft_stages import standin  # type: ignore[import-not-found]  # noqa: E402
from learning import Runner, machine, pct  # type: ignore[import-not-found]  # noqa: E402

from forge_cli.eval.metrics import bootstrap_mean_ci  # noqa: E402

HARNESSES = "pi,mini-swe-agent,codex,openclaw,claude-code"


def reach(run_dir: Path) -> dict[str, Any]:
    """The figures of one distill run from its results: share at reward 1 (template-clustered interval), calls
    per rollout, and what the others ended as."""
    from forge_cli.rollout.reader import read_results

    results = read_results(run_dir)
    if not results:
        return {"rollouts": 0}
    values = [1.0 if (r.reward or 0.0) >= 1.0 else 0.0 for r in results]
    clusters = [r.task_id.rpartition("-")[0] for r in results]  # the template: the task id less its instance
    low, high = bootstrap_mean_ci(values, clusters=clusters)
    missed = Counter(f"{r.status}, reward {r.reward:g}" if r.reward is not None else r.status
                     for r, v in zip(results, values, strict=True) if v < 1.0)
    return {"rollouts": len(results), "templates": len(set(clusters)), "reward_1": int(sum(values)),
            "share": sum(values) / len(values), "low": low, "high": high,
            "calls_per_rollout": sum(r.calls for r in results) / len(results), "not_reward_1": dict(missed)}


def installed(name: str) -> bool:
    """Is a bundle of harness ``name`` installed? (forge's own builtin harnesses need none.)"""
    from forge_cli.harness.bundles import installed_bundles, load_harness

    if load_harness(name).package.manager == "builtin":
        return True
    return any(b.get("name") == name for b in installed_bundles())


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--harnesses", default=HARNESSES, help="comma-separated harness names")
    parser.add_argument("--per-template", type=int, default=1, help="train instances per seen template")
    parser.add_argument("--seed", type=int, default=0, help="env.options.seed of the train draw")
    parser.add_argument("--output-dir", type=Path, default=REPO / "runs" / "teacher-reach")
    parser.add_argument("--json", type=Path, default=None, help="where the figures go (OUTPUT_DIR/teacher-reach.json)")
    args = parser.parse_args(argv)
    if args.per_template < 1:
        parser.error("--per-template must be at least 1")
    return args, extra


def main() -> int:
    args, extra = parse(sys.argv[1:])
    args.output_dir.mkdir(parents=True, exist_ok=True)
    runner = Runner(args.output_dir, extra, prefix="reach")
    draw = [f"env.options.seed={args.seed}", f"env.options.train_per_template={args.per_template}"]
    module = standin()
    rows: dict[str, Any] = {}
    for name in [h.strip() for h in args.harnesses.split(",") if h.strip()]:
        if not installed(name):
            runner.say(f"{name}: not installed (FORGE_HARNESSES={name} scripts/setup.sh harnesses): not measured")
            rows[name] = {"not_installed": True}
            continue
        started = time.monotonic()
        try:
            with module.TeacherServer(module.builtin_teacher(draw)) as server:
                stage = runner.run(name, "distill", [
                    "--teacher", server.base_url, "--teacher-model", "teacher-standin", "--trials", "1",
                    "--min-reward", "1", "--retries", "0", f"+harness={name}", *draw], "distill.json",
                    resumable=False)
        except SystemExit as failed:  # e.g. the SFT export refusing a wire format after every rollout ended
            run_dirs = [p for p in runner._existing(name) if (p / "results.jsonl").is_file()]
            if not run_dirs:
                raise
            rows[name] = {**reach(run_dirs[-1]), "run_dir": str(run_dirs[-1]), "distill_failed": str(failed),
                          "minutes": round((time.monotonic() - started) / 60, 1)}
            runner.say(f"{name}: the rollouts ended but forge distill failed after them (its message above); "
                       "their rewards are reported")
            continue
        assert stage.run_dir is not None
        rows[name] = {**reach(stage.run_dir), "run_dir": str(stage.run_dir), "minutes": round(stage.wall_s / 60, 1),
                      "kept_sft_sequences": stage.summary.get("sft", {}).get("sequences")}
    print(f"\nteacher stand-in through each harness: builtin train split, {args.per_template} instance(s) per "
          f"seen template (seed {args.seed}), {' '.join(extra) or 'default runtime'}")
    print(f"  {'harness':14} {'rollouts':>8} {'reward 1':>9} {'share (95% CI)':>26} {'calls':>6} {'min':>5}  others")
    for name, row in rows.items():
        if row.get("not_installed"):
            print(f"  {name:14} not installed")
        elif not row.get("rollouts"):
            print(f"  {name:14} no rollout finished ({row['run_dir']})")
        else:
            interval = f"{pct(row['share'])} ({pct(row['low'])} .. {pct(row['high'])})"
            others = ", ".join(f"{n} {k}" for k, n in row["not_reward_1"].items()) or "-"
            if row.get("distill_failed"):
                others += "; forge distill failed after the rollouts (no SFT samples)"
            print(f"  {name:14} {row['rollouts']:>8} {row['reward_1']:>9} {interval:>26} "
                  f"{row['calls_per_rollout']:>6.1f} {row['minutes']:>5.1f}  {others}")
    out = args.json or args.output_dir / "teacher-reach.json"
    out.write_text(json.dumps({"options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                               "overrides": extra, "machine": machine(), "harnesses": rows}, indent=2) + "\n")
    runner.say(f"figures written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
