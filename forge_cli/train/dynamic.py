"""DAPO dynamic sampling in forge's step loop: which groups of a step are trained, and refills when too few of
them carry a learning signal (``algo.dynamic_sampling``: off | drop | refill).

A group (the rollouts of one task in one step) whose rewards are all equal has all-zero advantages: it adds
nothing to the gradient but its tokens. ``drop`` leaves such groups out of the update; ``refill`` does too and then
runs new groups, up to ``algo.dynamic_sampling_max_rounds`` extra rounds, until ``trainer.tasks_per_step`` groups
with signal are collected (groups beyond that are surplus, not trained, as in veRL). ``off`` trains every group;
the metrics still say how many had signal.

What "all equal" is judged on: the verifier's rewards (DAPO's recipe filters on accuracy, ``filter_groups.metric
= acc``, so overlong shaping never makes a group look informative), of the rollouts the sample builder keeps:
``infra_error`` rollouts yield nothing (with ``algo.drop_group_on_infra`` their whole group goes), ``timeout`` and
``over_length`` rollouts follow ``algo.timeout`` / ``algo.over_length`` (``drop``: left out; ``zero``: reward 0;
``mask``: their reward counts), an unverified rollout counts 0. A group left with no rollout has no signal.
Equality is exact (``algos.dynamic_sampling_filter``).

Refill tasks come from a stream of their own, so the steps' task order (``loop.task_order``) is untouched: a run
with refill trains on the same main tasks per step as one without, and a resumed run draws the same refills. The
stream for step ``s`` is a shuffle of the task list seeded with ``"{seed}:refill:{s}"``; each round takes the next
tasks not yet used in the step (main or earlier rounds), and repeats tasks only once every task was used.
Refill groups belong to batch ``s`` (read with the step's rollouts) under their own group and rollout ids.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from forge_cli.config.schema import Experiment
from forge_cli.envs.task import Task
from forge_cli.rollout.result import RolloutResult
from forge_cli.rollout.runner import RolloutJob
from forge_cli.rollout.spec import group_id, rollout_id
from forge_cli.train.algos import dynamic_sampling_filter


def group_rewards(results: Iterable[RolloutResult], *, timeout: str = "mask", over_length: str = "mask",
                  drop_group_on_infra: bool = False) -> dict[str, list[float]]:
    """Per group (in first-seen order): the rewards its trained rollouts carry (see the module docstring)."""
    groups: dict[str, list[float]] = {}
    infra: set[str] = set()
    for r in results:
        rewards = groups.setdefault(r.group_id, [])
        treatment = {"timeout": timeout, "over_length": over_length}.get(r.status, "mask")
        if r.status == "infra_error":
            infra.add(r.group_id)
        elif treatment != "drop":
            rewards.append(0.0 if treatment == "zero" or r.reward is None else float(r.reward))
    if drop_group_on_infra:
        for group in infra:
            groups[group] = []
    return groups


@dataclass
class Selection:
    """The groups of one step and what dynamic sampling made of them."""

    mode: str
    # every group run this step, in order (main groups, then each refill round's)
    groups: list[str] = field(default_factory=list)
    # trained / without signal / with signal beyond tasks_per_step (refill only)
    kept: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    surplus: list[str] = field(default_factory=list)
    # groups whose rewards differ (off: also counted)
    with_signal: int = 0
    # extra generation rounds run (refill)
    rounds: int = 0

    def metrics(self) -> dict[str, float]:
        return {"dynamic_sampling": float(self.mode != "off"), "groups": float(len(self.groups)),
                "groups_with_signal": float(self.with_signal), "groups_kept": float(len(self.kept)),
                "groups_dropped": float(len(self.dropped)), "groups_surplus": float(len(self.surplus)),
                "dynamic_rounds": float(self.rounds)}


def select_groups(rewards: dict[str, list[float]], mode: str, target: int, rounds: int = 0) -> Selection:
    """Which groups train: ``off`` all of them; ``drop`` those with signal; ``refill`` those with signal, at most
    ``target`` (the first ones). A group with no rollout left has no signal; a group of one rollout is kept (veRL's
    rule: its advantage is its reward)."""
    present = {g: r for g, r in rewards.items() if r}
    with_signal = len(dynamic_sampling_filter(present, "drop").kept)
    if mode == "off":
        return Selection(mode, list(rewards), kept=list(rewards), with_signal=with_signal, rounds=rounds)
    chosen = dynamic_sampling_filter(present, mode, target if mode == "refill" else None)
    dropped = [g for g in rewards if g in set(chosen.dropped) or not rewards[g]]
    return Selection(mode, list(rewards), kept=chosen.kept, dropped=dropped, surplus=chosen.surplus,
                     with_signal=with_signal, rounds=rounds)


def refills_wanted(selection: Selection, target: int, max_rounds: int) -> int:
    """Groups to run in the next refill round (0: stop): what is missing to ``target``, while rounds are left."""
    if selection.mode != "refill" or selection.rounds >= max_rounds:
        return 0
    return max(0, target - len(selection.kept))


def refill_tasks(tasks: Sequence[Task], seed: int, step: int, used: set[str], count: int) -> list[Task]:
    """The next ``count`` refill tasks of ``step`` (see the module docstring): the step's seeded refill order
    without the tasks in ``used``, then, when more are wanted than are left, that whole order again (cycling)."""
    if count <= 0 or not tasks:
        return []
    order = list(tasks)
    random.Random(f"{seed}:refill:{step}").shuffle(order)
    fresh = [t for t in order if t.id not in used]
    return [fresh[i] if i < len(fresh) else order[(i - len(fresh)) % len(order)] for i in range(count)]


def tagged_job(run_id: str, incarnation: int, task: Task, sample: int, batch: int, tag: str,
               sampling: dict[str, Any] | None = None) -> RolloutJob:
    """A rollout of ``task`` in batch ``batch`` whose group and rollout ids carry ``tag`` (a refill slot, the
    evaluation), so they never collide with the batch's own groups or with another tag's."""
    key = f"{task.id}/{tag}"
    return RolloutJob(rollout_id(run_id, key, sample, batch, incarnation), task, sample,
                      group_id(run_id, key, batch), batch, sampling=sampling)


Runner = Callable[[list[RolloutJob]], list[RolloutResult]]


def sample_step(exp: Experiment, tasks: Sequence[Task], main: list[Task], step: int, run_id: str,
                incarnation: int, run: Runner, make_jobs: Callable[[list[Task]], list[RolloutJob]],
                say: Callable[[str], None]) -> tuple[list[RolloutJob], list[RolloutResult], Selection]:
    """Run the step's groups (``main`` via ``make_jobs``), then refill rounds as ``algo.dynamic_sampling`` asks;
    returns every job and result of the step and the selection (``kept`` names the groups to train)."""
    algo = exp.algo
    target = exp.trainer.tasks_per_step
    jobs = make_jobs(main)
    results = run(jobs)

    def rewards(done: list[RolloutResult]) -> dict[str, list[float]]:
        # the sample policy's treatments (algo.timeout, algo.over_length, algo.drop_group_on_infra)
        return group_rewards(done, timeout=str(getattr(algo, "timeout", "mask")),
                             over_length=str(getattr(algo, "over_length", "mask")),
                             drop_group_on_infra=bool(getattr(algo, "drop_group_on_infra", False)))

    selection = select_groups(rewards(results), algo.dynamic_sampling, target)
    used = {t.id for t in main}
    while (wanted := refills_wanted(selection, target, algo.dynamic_sampling_max_rounds)) > 0:
        rounds = selection.rounds + 1
        picked = refill_tasks(tasks, exp.run.seed, step, used, wanted)
        used.update(t.id for t in picked)
        say(f"step {step + 1}: {len(selection.kept)}/{target} groups with signal; refill round {rounds}: "
            f"{len(picked)} new group(s)")
        more = [tagged_job(run_id, incarnation, task, sample, step, f"refill{rounds}.{slot}")
                for slot, task in enumerate(picked) for sample in range(algo.group_size)]
        jobs += more
        results += run(more)
        selection = select_groups(rewards(results), algo.dynamic_sampling, target, rounds)
    return jobs, results, selection
