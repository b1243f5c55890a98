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
    replay: Annotated[str | None, typer.Option(
        "--replay", metavar="RUN/ROLLOUT", show_default=False,
        help="Replay a recorded rollout: its task again in a fresh sandbox, the harness's first calls answered from "
             "the recording (prompts checked token for token), the rest sampled live. Overrides are then key=value "
             "on the recorded experiment.")] = None,
    until: Annotated[int | None, typer.Option(
        "--until", metavar="K", show_default=False,
        help="With --replay: answer the first K calls from the recording (default: all of them).")] = None,
) -> None:
    """Run the experiment's tasks with its harness in sandboxes, recording every model call.

    With --dry-run, print the plan instead: task and rollout counts, and for the first rollouts
    the sandbox (docker run / Pod manifests / local command), the harness bundle, rendered config
    files, the one-shot command, env vars (secrets masked), upstream, timeouts and resources.

    With --replay RUN_DIR/ROLLOUT_ID [--until K], re-run one recorded rollout (docs/replay.md):
    the new run directory's replay.json says which calls were answered from the recording, where
    a prompt first diverged from it (the rollout then ends infra_error), and what was masked.
    """
    if replay is not None or until is not None:
        _replay(replay, until, overrides or [], dry_run, as_json)
        return
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


def _replay(reference: str | None, until: int | None, overrides: list[str], dry_run: bool, as_json: bool) -> None:
    from forge_cli.errors import UserError

    if reference is None:
        raise UserError("--until goes with --replay RUN_DIR/ROLLOUT_ID", exit_code=2)
    if dry_run:
        raise UserError("--replay has no --dry-run: it re-runs one recorded rollout", fix="leave out --dry-run",
                        exit_code=2)
    from forge_cli.cli.signals import stop_on_signals
    from forge_cli.replay.run import replay
    from forge_cli.rollout.progress import RunProgress

    with RunProgress(1) as progress, stop_on_signals(lambda: "the replay's run directory holds what it recorded"):
        summary = replay(reference, until, overrides, progress.say)
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    verdict = ("faithful: every recorded call answered, prompts identical" if summary["faithful"] else
               (summary["diverged"] or {}).get("message") or f"not reached: recorded calls {summary['not_reached']}")
    typer.echo(f"replay of {summary['source']['rollout_id']} ({summary['until']} of {summary['source']['calls']} "
               f"calls from the recording): {summary['status']}, reward {summary['reward']}, "
               f"{len(summary['replayed'])} answered from the recording, {len(summary['live'])} live; {verdict}; "
               f"masked {summary['prompt_tokens_masked']} of {summary['prompt_tokens_compared']} prompt tokens; "
               f"{summary['run_dir']}/replay.json")
