"""Calibration of the builtin suite: does each skill family give training a signal, split by split?

Training learns only from groups whose rewards differ. A family the default policy never solves and never
partly solves teaches nothing; neither does one it always solves. This script runs ``forge eval`` on the chosen
splits (``train`` and ``val`` by default: the test split is read once per published figure, never to choose
templates) with the same sampling settings, and judges **each family on each split**:

- its pass rate with a 95% Wilson interval: the family passes when the interval's lower end is at least
  ``MIN_PASS_LOW`` (5%: one pass in twelve trials is not enough, ~1.5%), **or**
- its chance that a group of 4 rollouts of one task has a reward spread (partial credit counts), estimated per
  task from its trials and averaged over the family's tasks: with 4 or more trials the unbiased estimate of
  1 - P(all four rewards equal); with 2-3 trials the share of trial pairs whose rewards differ, which is a lower
  bound of it (a group of 4 has a spread whenever any two differ). The family passes when it is at least
  ``MIN_SPREAD`` (25%: at least one group in four carries a signal).

It also prints the overall pass rate per split against the old target band (10-60%) and the held-out groups
(seen / unseen, guided or not) per split.

    .venv/bin/python benchmarks/calibrate_builtin.py [--splits train,val] [--trials 3] [--train-trials 2]
        [--harness react] [--temperature 0.3] [--upstream URL] [--output-dir runs/calibration] [--json out.json]
        [-- OVERRIDES]

Without ``--upstream`` each eval starts its own policy server (the default model). Extra Hydra overrides after
``--`` go to every eval (e.g. ``runtime=docker``; ``env.options.seed=1000`` for other instances).
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

from forge_cli.eval.metrics import spread_chance, wilson_interval  # noqa: E402

OVERALL_BAND = (0.10, 0.60)
MIN_PASS_LOW = 0.05
MIN_SPREAD = 0.25
GROUP = 4


def earlier_run(split: str, trials: int, args: argparse.Namespace) -> Path | None:
    """The newest run directory of this split under ``--output-dir`` made with the same harness, trials and
    temperature (an interrupted calibration continues there: its finished trials are kept)."""
    import yaml

    for run_dir in sorted(Path(args.output_dir).glob(f"calibrate-{split}-*"), reverse=True):
        try:
            saved = yaml.safe_load((run_dir / "config.yaml").read_text())
        except (OSError, yaml.YAMLError):
            continue
        if (saved.get("harness", {}).get("name"), saved.get("eval", {}).get("trials"),
                saved.get("eval", {}).get("temperature"), saved.get("env", {}).get("split")) == (
                args.harness, trials, args.temperature, split):
            return run_dir
    return None


def run_eval(split: str, trials: int, args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    earlier = None if args.fresh else earlier_run(split, trials, args)
    if earlier is not None:
        cmd = [sys.executable, "-m", "forge_cli", "eval", "--json", "--resume", str(earlier)]
    else:
        cmd = [sys.executable, "-m", "forge_cli", "eval", "--json", f"+harness={args.harness}", f"env.split={split}",
               f"eval.trials={trials}", f"run.output_dir={args.output_dir}", f"run.name=calibrate-{split}",
               f"eval.temperature={args.temperature}", "proxy.port=0", *extra]
        if args.upstream:
            cmd.append(f"proxy.upstream={args.upstream}")
    print(f"[calibrate] forge {' '.join(cmd[3:])}", file=sys.stderr, flush=True)
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise SystemExit(f"forge eval on split {split} failed with exit code {done.returncode}")
    report: dict[str, Any] = json.loads(done.stdout)
    report["wall_s"] = round(time.monotonic() - started, 1)
    return report


def family_rows(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """family (and each held-out group, and 'overall') -> passes, trials, Wilson interval, mean score, spread."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for task in report["tasks"]:
        counted = [t for t in task["trials"] if t.get("status") != "infra_error" and t.get("passed") is not None]
        seen = task.get("seen")
        names = ["overall", str(task["category"])]
        if seen is not None:
            side = "seen" if seen else "unseen"
            names += [side, f"{side}/{'guided' if task.get('guided') else 'not guided'}"]
        for name in names:
            groups.setdefault(name, []).append({"trials": counted})
    out = {}
    for name, tasks in groups.items():
        trials = [t for task in tasks for t in task["trials"]]
        passes = sum(1 for t in trials if t.get("passed") is True)
        low, high = wilson_interval(passes, len(trials)) if trials else (0.0, 0.0)
        spreads = [s for task in tasks if (s := spread_chance([float(t.get("reward") or 0.0)
                                                                 for t in task["trials"]], GROUP)) is not None]
        out[name] = {"tasks": len(tasks), "trials": len(trials), "passes": passes,
                     "pass_rate": passes / len(trials) if trials else None, "wilson_low": low, "wilson_high": high,
                     "mean_score": sum(float(t.get("reward") or 0.0) for t in trials) / len(trials) if trials else None,
                     "spread4": sum(spreads) / len(spreads) if spreads else None}
        spread4 = sum(spreads) / len(spreads) if spreads else 0.0
        out[name]["signal"] = bool(low >= MIN_PASS_LOW or spread4 >= MIN_SPREAD)
    return out


def pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def main() -> int:
    argv = sys.argv[1:]
    extra: list[str] = []
    if "--" in argv:
        extra, argv = argv[argv.index("--") + 1:], argv[:argv.index("--")]
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--splits", default="train,val", help="comma-separated; test only for a published figure")
    parser.add_argument("--trials", type=int, default=3, help="trials per task (val, test)")
    parser.add_argument("--train-trials", type=int, default=2, help="trials per task on train (96 tasks)")
    parser.add_argument("--harness", default="react")
    parser.add_argument("--temperature", type=float, default=0.3)
    parser.add_argument("--upstream", default=None, help="a running policy server (else each eval starts one)")
    parser.add_argument("--output-dir", default=str(REPO / "runs" / "calibration"))
    parser.add_argument("--json", default=None, help="also write the figures here")
    parser.add_argument("--fresh", action="store_true",
                        help="start every split anew (default: continue this split's newest run in --output-dir "
                             "made with the same harness, trials and temperature, with that run's saved overrides)")
    args = parser.parse_args(argv)
    splits = [s.strip() for s in args.splits.split(",") if s.strip()]
    if "test" in splits:
        print("[calibrate] note: reading the test split; choose templates and recipes on train and val",
              file=sys.stderr)
    reports = {s: run_eval(s, args.train_trials if s == "train" else args.trials, args, extra) for s in splits}
    table = {split: family_rows(r) for split, r in reports.items()}
    names = ["overall", "seen", "seen/guided", "seen/not guided", "unseen", "unseen/guided", "unseen/not guided"]
    families = sorted({f for t in table.values() for f in t if f not in names})
    print(f"\nbuiltin suite, harness {args.harness}, temperature {args.temperature}; a family has signal on a split "
          f"when its pass rate's Wilson 95% lower end is >= {pct(MIN_PASS_LOW)} or a group of {GROUP} has a reward "
          f"spread with chance >= {pct(MIN_SPREAD)}")
    print("| family | " + " | ".join(f"{s}: passes/trials, pass rate (95% CI), spread in a group of {GROUP}, signal"
                                     for s in splits) + " |")
    print("|---|" + "---|" * len(splits))
    for name in [*families, *names]:
        cells = []
        for split in splits:
            row = table[split].get(name)
            cells.append("-" if row is None else
                         f"{row['passes']}/{row['trials']}, {pct(row['pass_rate'])} ({pct(row['wilson_low'])}-"
                         f"{pct(row['wilson_high'])}), {pct(row['spread4'])}, {'yes' if row['signal'] else 'NO'}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    for split, report in reports.items():
        print(f"{split}: {report['meta']['run_dir']} ({report['wall_s']} s)")
    missing = {split: [f for f in families if f in table[split] and not table[split][f]["signal"]] for split in splits}
    band = {split: OVERALL_BAND[0] <= (table[split]["overall"]["pass_rate"] or 0.0) <= OVERALL_BAND[1]
            for split in splits}
    for split in splits:
        print(f"{split}: " + ("every family has signal" if not missing[split] else
                              f"families without signal: {', '.join(missing[split])}")
              + f"; overall {pct(table[split]['overall']['pass_rate'])} "
              + ("within" if band[split] else "OUTSIDE") + f" the {pct(OVERALL_BAND[0])}-{pct(OVERALL_BAND[1])} band")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(
            {"harness": args.harness, "temperature": args.temperature, "trials": {s: (
                args.train_trials if s == "train" else args.trials) for s in splits}, "overrides": extra,
             "min_pass_low": MIN_PASS_LOW, "min_spread": MIN_SPREAD, "table": table, "families_without_signal": missing,
             "runs": {s: r["meta"]["run_dir"] for s, r in reports.items()},
             "wall_s": {s: r["wall_s"] for s, r in reports.items()}}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
