"""``forge branch``: fork continuations of a recorded rollout from the state after one of its calls."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from forge_cli.cli.common import JsonFlag


def branch(
    reference: Annotated[str, typer.Argument(metavar="RUN_DIR/ROLLOUT_ID", show_default=False,
                                             help="A run directory and one of the rollout ids in its results.jsonl.")],
    overrides: Annotated[list[str] | None, typer.Argument(
        show_default=False, help="key=value on the recorded experiment, e.g. model.path=CHECKPOINT.")] = None,
    at: Annotated[str, typer.Option(
        "--at", metavar="K|first-failure|random",
        help="Where to branch: call K (1 to the last; calls 0..K-1 are answered from the recording, K on are "
             "sampled live), the first call whose prompt carries a failed tool result, or a random call.")] = "random",
    n: Annotated[int, typer.Option("-n", help="Continuations to fork.")] = 4,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed of --at random.", show_default=False)] = None,
    as_json: JsonFlag = False,
) -> None:
    """Fork N continuations of a recorded rollout from the state after one of its calls (docs/branching.md).

    Each continuation re-runs the task in a fresh sandbox with the rollout's first K calls answered from the
    recording (prompts checked token for token, as forge rollout --replay does) and samples the rest live. The
    original and its continuations form one group of their own in the new run directory: the shared prefix carries
    no loss in their samples and their advantages are computed within the group (printed, and in branch.json).
    """
    from forge_cli.cli.signals import stop_on_signals
    from forge_cli.replay.branch import branch as fork
    from forge_cli.rollout.progress import RunProgress

    with RunProgress(n) as progress, stop_on_signals(lambda: "the branch's run directory holds what it recorded"):
        summary = fork(reference, at, n, overrides or [], progress.say, seed)
    summary["samples"] = _samples(Path(summary["run_dir"]), summary)
    (Path(summary["run_dir"]) / "branch.json").write_text(json.dumps(summary, indent=2) + "\n")
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    typer.echo(f"branch of {summary['source']['rollout_id']} at call {summary['at']} ({summary['chosen_by']}), "
               f"group {summary['group_id']}: {summary['run_dir']}")
    by_id = {s["rollout_id"]: s for s in summary["samples"]}
    for member in summary["members"]:
        mine = by_id.get(member["rollout_id"], {})
        typer.echo(f"  {'original    ' if member['original'] else 'continuation'} {member['rollout_id']}: "
                   f"{member['status']}, reward {member['reward']}, {member['calls']} calls, advantage "
                   f"{mine.get('advantage')}, {mine.get('loss_tokens', 0)} loss tokens"
                   + (f" [{member['diverged']}]" if member.get("diverged") else ""))


def _samples(run_dir: Path, summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Per member, what the sample builder makes of it under the run's own algo options: advantage (within the
    branch group), loss tokens (the prefix's carry none) and samples."""
    from forge_cli.cli.common import saved_experiment
    from forge_cli.rollout.reader import read_run
    from forge_cli.train.samples import build_batch
    from forge_cli.train.step import sample_policy

    exp, _ = saved_experiment(run_dir)
    batch = build_batch(read_run(run_dir), sample_policy(exp))
    out = []
    for built in batch.rollouts:
        out.append({"rollout_id": built.rollout_id, "group_id": built.group_id, "dropped": built.dropped,
                    "advantage": round(built.advantage, 6) if not built.dropped else None,
                    "samples": len(built.samples), "loss_tokens": sum(s.loss_tokens for s in built.samples)})
    return out
