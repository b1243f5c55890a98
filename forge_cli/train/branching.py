"""Branching inside ``forge train`` (``algo.branch_at``; docs/branching.md).

After a step's rollouts, up to ``algo.branch_rollouts`` of them that fell short of their group's best reward (and
made at least two calls) are forked ``algo.branch_n`` times from the state after the call ``algo.branch_at`` picks
(``forge_cli/replay/branch.py``: ``branch_point``). Each continuation is a replay of the original's first K calls
(the session's replay upstream answers them, prompts checked token for token) that samples live from call K. The
original and its continuations form one group of their own (``branch_group``), apart from the step's whole-rollout
groups; every member has ``prefix_calls = K``, so the shared prefix carries no loss, and the original's copy in the
group has its own id (``<id>~at<K>``) since its whole-rollout self trains in its own group too.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from typing import Any

from forge_cli.config.schema import Experiment
from forge_cli.envs.task import Task
from forge_cli.errors import UserError
from forge_cli.replay.branch import branch_group, branch_point
from forge_cli.replay.script import script
from forge_cli.rollout.reader import RunRollout, read_run
from forge_cli.rollout.runner import RolloutJob
from forge_cli.rollout.session import RolloutSession

# continuations' sample numbers start here, apart from the step's own groups (0 .. group size and refills)
FIRST_SAMPLE = 1000


def candidates(rollouts: list[RunRollout], exp: Experiment, step: int) -> list[tuple[RunRollout, int]]:
    """The rollouts to branch and where: failed (reward 0) or short of their group's best reward, two calls or more,
    and a branch point (the worst first)."""
    best: dict[str, float] = {}
    for r in rollouts:
        best[r.result.group_id] = max(best.get(r.result.group_id, 0.0), float(r.result.reward or 0.0))
    picked: list[tuple[RunRollout, int]] = []
    for r in sorted(rollouts, key=lambda r: float(r.result.reward or 0.0)):
        if len(picked) >= exp.algo.branch_rollouts:
            break
        if (r.result.status not in ("ok", "agent_error") or len(r.calls) < 2
                or (float(r.result.reward or 0.0) >= best[r.result.group_id] and best[r.result.group_id] > 0)):
            continue
        try:
            k = branch_point(r, exp.algo.branch_at, random.Random(f"{exp.run.seed}:{step}:{r.result.rollout_id}")
                             .randrange(2**31))
            picked.append((r, k))
        except UserError:  # no failed tool result in it (first-failure): nothing to branch
            continue
    return picked


def branch_step(session: RolloutSession, rollouts: list[RunRollout], tasks: dict[str, Task], exp: Experiment,
                step: int, run: Callable[[list[RolloutJob]], Any]) -> tuple[list[RunRollout], dict[str, float]]:
    """Fork the step's candidates (``run`` runs the jobs in the session); the branch groups' members (continuations
    and the originals' copies) and the step's branching metrics."""
    picks = candidates(rollouts, exp, step)
    upstream = session.relay_server
    if not picks or upstream is None:
        return [], {"branch_groups": 0.0}
    jobs: list[RolloutJob] = []
    copies: list[RunRollout] = []
    for index, (original, k) in enumerate(picks):
        group = branch_group(original.result.rollout_id, k)
        calls = script(original, k)
        for i in range(exp.algo.branch_n):
            base = session.job(tasks[original.result.task_id], FIRST_SAMPLE + index * exp.algo.branch_n + i, step)
            job = RolloutJob(base.rollout_id, base.task, base.sample, group, step, prefix_calls=k)
            upstream.expect(job.rollout_id, calls)
            jobs.append(job)
        copy = dataclasses.replace(original.result, rollout_id=f"{original.result.rollout_id}~at{k}",
                                   group_id=group, prefix_calls=k)
        copies.append(RunRollout(copy, original.calls))
    run(jobs)
    ids = {j.rollout_id for j in jobs}
    continuations = [r for r in read_run(session.run_dir, step=step) if r.result.rollout_id in ids]
    reports = [upstream.report(j.rollout_id) for j in jobs]
    faithful = [report["diverged"] is None for report in reports]
    # the answers the replay served from the recording: tokens a from-scratch rollout would have sampled again
    replayed = sum(call["completion_tokens"] for report in reports for call in report["replayed"])
    rewards = [float(r.result.reward or 0.0) for r in continuations]
    return continuations + copies, {
        "branch_groups": float(len(picks)), "branch_rollouts": float(len(jobs)),
        "branch_prefix_calls_mean": sum(k for _, k in picks) / len(picks),
        "branch_prefix_faithful": sum(faithful) / len(faithful),
        "branch_prefix_tokens_replayed": float(replayed),
        "branch_reward_mean": sum(rewards) / len(rewards) if rewards else 0.0,
        "branch_original_reward_mean": sum(float(o.result.reward or 0.0) for o, _ in picks) / len(picks)}
