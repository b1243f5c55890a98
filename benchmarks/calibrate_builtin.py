"""Calibration of the builtin suite: pass rate per skill family and split for one harness on the default model.

The training benchmark needs signal: a suite the policy never solves (or always solves) teaches nothing. This
script runs ``forge eval`` on the builtin ``train`` and ``test`` splits with the same sampling settings and prints
the pass rate and mean score per family and overall, next to the target (10-60% overall, no family at 0%).

    .venv/bin/python benchmarks/calibrate_builtin.py [--harness react] [--trials 2] [--train-trials 1]
        [--upstream http://127.0.0.1:8000] [--output-dir runs/calibration] [--json out.json] [-- OVERRIDES]

Without ``--upstream`` each eval starts its own policy server (the default model). Extra Hydra overrides after
``--`` go to both evals (e.g. ``runtime=docker`` for a real harness, ``model.max_output_tokens=192``).
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
TARGET = (0.10, 0.60)


def run_eval(split: str, trials: int, args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "forge_cli", "eval", "--json", f"+harness={args.harness}", f"env.split={split}",
           f"eval.trials={trials}", f"run.output_dir={args.output_dir}", f"run.name=calibrate-{split}",
           f"eval.temperature={args.temperature}", "proxy.port=0", *extra]
    if args.upstream:
        cmd.append(f"proxy.upstream={args.upstream}")
    print(f"[calibrate] {' '.join(cmd[3:])}", file=sys.stderr, flush=True)
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise SystemExit(f"forge eval on split {split} failed with exit code {done.returncode}")
    report: dict[str, Any] = json.loads(done.stdout)
    report["wall_s"] = round(time.monotonic() - started, 1)
    return report


def rows(report: dict[str, Any]) -> dict[str, tuple[float | None, float | None, int]]:
    """family -> (pass rate, mean score, trials), plus 'overall'."""
    out = {}
    for name, group in [*report["categories"].items(), ("overall", report["overall"])]:
        out[name] = (group["pass_rate"]["value"], group["mean_score"]["value"], group["trials"])
    return out


def pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def main() -> int:
    argv = sys.argv[1:]
    extra: list[str] = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--harness", default="react")
    parser.add_argument("--trials", type=int, default=2, help="trials per test task")
    parser.add_argument("--train-trials", type=int, default=1, help="trials per train task (0: skip train)")
    parser.add_argument("--temperature", type=float, default=0.3)
    parser.add_argument("--upstream", default=None, help="a running policy server (else each eval starts one)")
    parser.add_argument("--output-dir", default=str(REPO / "runs" / "calibration"))
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    reports = {"test": run_eval("test", args.trials, args, extra)}
    if args.train_trials:
        reports["train"] = run_eval("train", args.train_trials, args, extra)
    table = {split: rows(r) for split, r in reports.items()}
    families = [*sorted({f for t in table.values() for f in t if f != "overall"}), "overall"]
    splits = list(table)
    print(f"\nbuiltin suite, harness {args.harness}, temperature {args.temperature}, "
          f"trials: test {args.trials}, train {args.train_trials}; target overall "
          f"{pct(TARGET[0])}-{pct(TARGET[1])}, no family at 0%")
    print("| family | " + " | ".join(f"{s} pass rate (mean score, trials)" for s in splits) + " |")
    print("|---|" + "---|" * len(splits))
    for family in families:
        cells = []
        for split in splits:
            rate, score, n = table[split].get(family, (None, None, 0))
            cells.append(f"{pct(rate)} ({'-' if score is None else f'{score:.2f}'}, {n})")
        print(f"| {family} | " + " | ".join(cells) + " |")
    for split, report in reports.items():
        print(f"{split}: {report['meta']['run_dir']} ({report['wall_s']} s)")
    overall = [table[s]["overall"][0] for s in splits]
    zero = [f for f in families[:-1] if all((table[s].get(f, (0.0,))[0] or 0.0) == 0.0 for s in splits)]
    ok = all(r is not None and TARGET[0] <= r <= TARGET[1] for r in overall) and not zero
    print(("within target" if ok else "OUTSIDE target") + (f"; families at 0%: {', '.join(zero)}" if zero else ""))
    if args.json:
        Path(args.json).write_text(json.dumps({"table": table, "runs": {s: r["meta"]["run_dir"]
                                                                        for s, r in reports.items()}}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
