"""``forge rollout``: run tasks x harness in sandboxes through the capture proxy (or plan it)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from forge_cli.cli.common import ConfigDir, JsonFlag, Overrides, load
from forge_cli.errors import UserError


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
        raise UserError("running rollouts for real is not available in this version of forge yet",
                        fix="use `forge rollout --dry-run ...` to see the plan")
    from forge_cli.rollout.plan import build_plan

    plan = build_plan(composed.experiment)
    if as_json:
        typer.echo(json.dumps(plan.to_dict(), indent=2))
        return
    from forge_cli.rollout.plan_view import show

    show(plan)
