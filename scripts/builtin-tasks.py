#!/usr/bin/env python3
"""Print or export the tasks of forge's builtin suite (forge_cli/envs/builtin/).

    .venv/bin/python scripts/builtin-tasks.py [--split train|val|test|all] [--seed N] [--train-per-template N]
        [--val-per-template N] [--test-per-template N] [--templates] [--solutions] [--export FILE]

Prints one line per task (id, split, difficulty, instruction), or with --templates one per template (its family,
difficulty, whether it is guided, and whether it is seen in training or held out for val or test). The options
are those of env.options (`forge rollout env.options.seed=5 env.options.train_per_template=10` runs the same tasks).
--solutions adds each task's reference solution. --export FILE writes the tasks as a flat task file (verifiers
and expected answers included: keep it away from the harness) that `env.path=FILE` runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from forge_cli.envs.builtin import BuiltinOptions, generate, templates
from forge_cli.envs.builtin.taskfile import dump_tasks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=["train", "val", "test", "all"], default="all")
    parser.add_argument("--seed", type=int, default=0, help="base seed (env.options.seed)")
    parser.add_argument("--train-per-template", type=int, default=3)
    parser.add_argument("--val-per-template", type=int, default=1)
    parser.add_argument("--test-per-template", type=int, default=1)
    parser.add_argument("--templates", action="store_true", help="list the templates instead of the tasks")
    parser.add_argument("--solutions", action="store_true", help="print each task's reference solution")
    parser.add_argument("--export", type=Path, metavar="FILE", help="write the tasks as a flat task file")
    args = parser.parse_args(argv)
    if args.templates:
        for template in templates():
            role = f"unseen ({template.held_out})" if template.held_out else "seen"
            kind = "guided" if template.guided else "not guided"
            doc = " ".join((template.make.__doc__ or "").split())
            print(f"{template.key:34} {template.difficulty:6} {kind:10} {role:13} {doc}")
        return 0
    options = BuiltinOptions(seed=args.seed, train_per_template=args.train_per_template,
                             val_per_template=args.val_per_template, test_per_template=args.test_per_template)
    splits = generate(options)
    chosen = [(task, split) for split, tasks in splits.items() if args.split in ("all", split) for task in tasks]
    if args.export:
        args.export.write_text(dump_tasks(chosen), encoding="utf-8")
        print(f"wrote {len(chosen)} tasks to {args.export} (run them with env.path={args.export})")
        return 0
    for task, split in chosen:
        print(f"{task.id:36} {split:5} {task.metadata['difficulty']:6} {task.instruction}")
        if args.solutions:
            print(f"{'':36} solution: {task.metadata['solution']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
