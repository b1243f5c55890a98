"""Does a policy trained in one harness work in another? Pass@1 of each policy through each harness on the held-out
(unseen) templates of the builtin suite, with 95% intervals, and each policy's change from the base policy in the
same harness (issue 32, item 7).

    .venv/bin/python benchmarks/harness_matrix.py --policy base --policy sft=/root/learning-sft-pi \\
        --policy rl=/root/learning-rl-pi [--harnesses react,pi,mini-swe-agent] [--trials 2] [--split test] \\
        [--seed 0] [--eval-temperature 0.3] [--output-dir runs/matrix] [--json FILE] [-- OVERRIDES]

A policy is ``base`` (the default model), ``NAME=CHECKPOINT``, or ``NAME=DIR`` where DIR is the output directory of
``benchmarks/learning.py``: for an SFT benchmark (``--sft``) the checkpoint its repeat 0 chose, for an RL one the
last checkpoint of its repeat 0's training run. Each cell is one ``forge eval`` through that harness of the
``--split`` tasks whose template is held out for that split (no policy trained on any instance of them), with the
draw ``env.options.seed=SEED`` (learning.py's repeat 0 uses seed 0: the same instances it evaluated),
``--trials`` trials per task at ``--eval-temperature``. OVERRIDES go to every cell (``runtime=docker``
recommended).

Figures per cell: pass@1 over the unseen tasks with a 95% bootstrap interval that resamples templates, the same for
the guided and not guided ones, and the rollouts that ended in an infrastructure error. Per policy other than the
base: the paired change from the base in the same harness, with its interval. Cells are resumable like the
learning benchmark's stages (``OUTPUT_DIR/matrix-<policy>-<harness>-<time>``: a finished one is reused, an unfinished
one continued); the JSON (default ``OUTPUT_DIR/matrix.json``) holds every figure, run directory and wall time.
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

from learning import Runner, machine, pct, pts  # type: ignore[import-not-found]  # noqa: E402

from forge_cli.eval.compare import load_eval  # noqa: E402
from forge_cli.eval.effect import paired_effect, paired_rows  # noqa: E402
from forge_cli.eval.metrics import bootstrap_mean_ci, task_cluster  # noqa: E402

GROUPS = ("unseen", "unseen/guided", "unseen/not guided")


def policy_checkpoint(spec: str) -> tuple[str, str | None]:
    """``base`` -> ("base", None); ``NAME=PATH`` -> (NAME, the checkpoint PATH names)."""
    if spec == "base":
        return "base", None
    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        raise SystemExit(f"error: --policy {spec}: give base, NAME=CHECKPOINT or NAME=LEARNING_OUTPUT_DIR")
    where = Path(path).expanduser()
    options_file = where / "learning-options.json"
    if not options_file.is_file():
        if not (where / "config.json").is_file() and not (where / "adapter_config.json").is_file():
            raise SystemExit(f"error: --policy {spec}: {where} is neither a checkpoint (config.json) nor a learning "
                             "benchmark's output directory (learning-options.json)")
        return name, str(where)
    sft = bool(json.loads(options_file.read_text()).get("sft"))
    pattern = "learning-r0-sft-2*/summary.json" if sft else "learning-r0-train-2*/summary.json"
    done = sorted(where.glob(pattern))
    if not done:
        raise SystemExit(f"error: --policy {spec}: {where} has no finished repeat 0 ({pattern})")
    summary = json.loads(done[-1].read_text())
    checkpoint = summary.get("best") if sft else (summary.get("checkpoints") or [None])[-1]
    if not checkpoint:
        raise SystemExit(f"error: --policy {spec}: {done[-1]} names no checkpoint")
    return name, str(checkpoint)


def unseen_task_ids(split: str, seed: int, extra: list[str]) -> list[str]:
    """The ``split`` tasks of the draw whose template is held out for that split."""
    from forge_cli.config.compose import compose
    from forge_cli.envs.source import load_tasks

    env = compose([*extra, f"env.split={split}", f"env.options.seed={seed}"]).experiment.env
    ids = [t.id for t in load_tasks(env).tasks if (t.metadata or {}).get("held_out") == split]
    if not ids:
        raise SystemExit(f"error: the {split} split of env {env.name} has no task of a held-out template "
                         "(the matrix needs the builtin suite, or a source that marks held_out templates)")
    return ids


def cell_figures(run_dir: Path) -> dict[str, Any]:
    """Pass@1 per group over the cell's tasks, with a template-clustered 95% interval."""
    data = load_eval(run_dir)[1]
    out: dict[str, Any] = {"run": str(run_dir), "infra_errors": len(data.get("infra_errors") or [])}
    for group in GROUPS:
        rows = [r for r in data["tasks"] if (r.get("pass_at") or {}).get("1") is not None and not r.get("seen")
                and (group == "unseen" or group.endswith("/guided") == bool(r.get("guided")))]
        if not rows:
            out[group] = None
            continue
        values = [float(r["pass_at"]["1"]) for r in rows]
        clusters = [task_cluster(str(r["task_id"]), r.get("template")) for r in rows]
        low, high = bootstrap_mean_ci(values, clusters=clusters)
        out[group] = {"tasks": len(rows), "templates": len(set(clusters)), "pass1": sum(values) / len(values),
                      "low": low, "high": high}
    return out


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", action="append", default=[],
                        help="base, NAME=CHECKPOINT or NAME=LEARNING_OUTPUT_DIR (repeatable; base is always added)")
    parser.add_argument("--harnesses", default="react,pi,mini-swe-agent", help="comma-separated harness names")
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--split", default="test", help="test for a published figure, val while choosing")
    parser.add_argument("--seed", type=int, default=0, help="env.options.seed: the draw of task instances")
    parser.add_argument("--eval-temperature", type=float, default=0.3)
    parser.add_argument("--output-dir", type=Path, default=REPO / "runs" / "matrix")
    parser.add_argument("--json", type=Path, default=None, help="where the figures go (OUTPUT_DIR/matrix.json)")
    args = parser.parse_args(argv)
    if args.trials < 1:
        parser.error("--trials must be at least 1")
    return args, extra


def main() -> int:
    args, extra = parse(sys.argv[1:])
    policies = dict(policy_checkpoint(spec) for spec in ["base", *[p for p in args.policy if p != "base"]])
    harnesses = [h.strip() for h in args.harnesses.split(",") if h.strip()]
    ids = unseen_task_ids(args.split, args.seed, extra)
    runner = Runner(args.output_dir, extra, prefix="matrix")
    args.output_dir.mkdir(parents=True, exist_ok=True)
    cells: dict[str, dict[str, Any]] = {}
    for harness in harnesses:
        for name, checkpoint in policies.items():
            stage = runner.run(f"{name}-{harness}", "eval", [
                f"+harness={harness}", f"env.split={args.split}", f"env.task_ids=[{','.join(ids)}]",
                f"eval.trials={args.trials}", f"eval.temperature={args.eval_temperature}",
                f"env.options.seed={args.seed}", *([f"model.path={checkpoint}"] if checkpoint else [])], "eval.json")
            assert stage.run_dir is not None
            figures = cell_figures(stage.run_dir)
            figures["wall_s"] = round(stage.wall_s)
            if name != "base":
                rows = paired_rows(Path(cells["base"][harness]["run"]), stage.run_dir, None, 0)
                change = paired_effect(rows, "unseen")
                figures["change_from_base"] = change.to_dict() if change else None
            cells.setdefault(name, {})[harness] = figures
    print(f"\npass@1 on the {len(ids)} {args.split} tasks of held-out templates, {args.trials} trials each "
          f"(95% interval, templates resampled); change from the base policy in the same harness below")
    print(f"  {'policy':8} " + " ".join(f"{h:>28}" for h in harnesses))
    for name, row in cells.items():
        print(f"  {name:8} " + " ".join(
            f"{pct(c['unseen']['pass1'])} ({pct(c['unseen']['low'])}..{pct(c['unseen']['high'])})".rjust(28)
            for c in (row[h] for h in harnesses)))
    for name, row in cells.items():
        if name == "base":
            continue
        print(f"  {name + ' - base':8} " + " ".join(
            (f"{pts(e['delta'])} ({pts(e['low'])}..{pts(e['high'])})" if e else "-").rjust(28)
            for e in (row[h].get("change_from_base") for h in harnesses)))
    out = args.json or args.output_dir / "matrix.json"
    out.write_text(json.dumps({"options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                               "overrides": extra, "policies": policies, "task_ids": ids, "machine": machine(),
                               "cells": cells}, indent=2) + "\n")
    runner.say(f"figures written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
