"""``forge rollout``: run tasks x harness in sandboxes through the capture proxy (or plan it)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from forge_cli.cli.common import ConfigDir, JsonFlag, Overrides, load


def rollout(
    overrides: Overrides = None,
    config_dir: ConfigDir = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the plan; start nothing.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Run the experiment's tasks with its harness in sandboxes, recording every model call.

    With --dry-run, print the plan instead: task and rollout counts, and for the first rollouts
    the sandbox (docker run / Pod manifests / local command), the harness bundle, rendered config
    files, the one-shot command, env vars (secrets masked), upstream, timeouts and resources.
    """
    composed = load(overrides, config_dir)
    if not dry_run:
        from forge_cli.cli.signals import stop_on_signals
        from forge_cli.rollout.run import execute

        run_dir: list[str] = [f"{composed.experiment.run.output_dir}/<run>"]
        with stop_on_signals(lambda: f"finished rollouts are in {run_dir[0]}/results.jsonl, every recorded call in "
                                     f"{run_dir[0]}/traces.sqlite"):
            summary = execute(composed.experiment, composed.experiment.model_dump(mode="json"),  # progress: stderr
                              on_run_dir=lambda path: run_dir.__setitem__(0, str(path)))
        if as_json:
            typer.echo(json.dumps(summary, indent=2))
        else:
            typer.echo(f"run {summary['run_id']}: {summary['status']} mean reward {summary['mean_reward']}, "
                       f"{summary['calls']} calls; results in {summary['run_dir']}")
        return
    from forge_cli.rollout.plan import build_plan

    plan = build_plan(composed.experiment)
    if as_json:
        typer.echo(json.dumps(plan.to_dict(), indent=2))
        return
    from forge_cli.rollout.plan_view import show

    show(plan)
