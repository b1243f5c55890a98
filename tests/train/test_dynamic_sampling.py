"""DAPO dynamic sampling in the step loop (forge_cli/train/dynamic.py), on hand-made results: which rewards a group
is judged on, which groups train, how many refills are run, which tasks refill, and ids that never collide."""

from __future__ import annotations

from forge_cli.config.compose import compose
from forge_cli.envs.task import Task
from forge_cli.rollout.result import RolloutResult
from forge_cli.rollout.runner import RolloutJob
from forge_cli.rollout.spec import group_id, rollout_id
from forge_cli.train.dynamic import (
    Selection,
    group_rewards,
    refill_tasks,
    refills_wanted,
    sample_step,
    select_groups,
    tagged_job,
)
from forge_cli.train.loop import task_order

TASKS = [Task(id=f"t{i}", instruction="") for i in range(6)]


def _result(group: str, reward: float | None, status: str = "ok") -> RolloutResult:
    return RolloutResult(rollout_id=f"{group}-{reward}-{status}", task_id=group, group_id=group, harness="react",
                         status=status, reward=reward)  # type: ignore[arg-type]


def test_group_rewards_follow_the_sample_policy() -> None:
    results = [_result("a", 1.0), _result("a", None), _result("b", 1.0), _result("b", 0.0, "timeout"),
               _result("c", 1.0), _result("c", 1.0, "infra_error"), _result("d", 0.5, "over_length")]
    assert group_rewards(results) == {"a": [1.0, 0.0], "b": [1.0, 0.0], "c": [1.0], "d": [0.5]}
    assert group_rewards(results, timeout="drop", over_length="zero") == {
        "a": [1.0, 0.0], "b": [1.0], "c": [1.0], "d": [0.0]}
    assert group_rewards(results, drop_group_on_infra=True)["c"] == []


def test_select_groups_per_mode() -> None:
    rewards = {"a": [1.0, 0.0], "b": [1.0, 1.0], "c": [0.0, 0.0], "d": [0.5], "e": [], "f": [0.0, 1.0]}
    off = select_groups(rewards, "off", 4)
    assert (off.kept, off.dropped, off.with_signal) == (list(rewards), [], 3)
    drop = select_groups(rewards, "drop", 4)
    assert (drop.kept, drop.dropped, drop.surplus) == (["a", "d", "f"], ["b", "c", "e"], [])
    refill = select_groups(rewards, "refill", 2, rounds=1)
    assert (refill.kept, refill.surplus, refill.rounds) == (["a", "d"], ["f"], 1)
    assert drop.metrics() == {"dynamic_sampling": 1.0, "groups": 6.0, "groups_with_signal": 3.0, "groups_kept": 3.0,
                              "groups_dropped": 3.0, "groups_surplus": 0.0, "dynamic_rounds": 0.0}
    assert off.metrics()["dynamic_sampling"] == 0.0


def test_refills_wanted_stops_at_the_target_or_the_last_round() -> None:
    two = Selection("refill", kept=["a", "b"], rounds=0)
    assert refills_wanted(two, 4, 3) == 2
    assert refills_wanted(Selection("refill", kept=["a"], rounds=3), 4, 3) == 0
    assert refills_wanted(Selection("refill", kept=["a", "b", "c", "d"]), 4, 3) == 0
    assert refills_wanted(Selection("drop", kept=[]), 4, 3) == 0


def test_refill_tasks_are_seeded_fresh_first_and_leave_the_step_order_alone() -> None:
    before = [task_order(TASKS, 7, s, 2) for s in range(4)]
    first = refill_tasks(TASKS, 7, 1, {"t0", "t1"}, 3)
    assert first == refill_tasks(TASKS, 7, 1, {"t0", "t1"}, 3), "the same (seed, step) draws the same refills"
    assert len({t.id for t in first}) == 3 and not {t.id for t in first} & {"t0", "t1"}
    # only one task is left unused: it comes first, then the whole order again
    left = refill_tasks(TASKS, 7, 1, {"t0", "t1", "t2", "t3", "t4"}, 3)
    order = refill_tasks(TASKS, 7, 1, set(), 6)
    assert left == [TASKS[5], order[0], order[1]]
    everything = refill_tasks(TASKS, 7, 1, {t.id for t in TASKS}, 7)
    assert sorted(t.id for t in everything[:6]) == [t.id for t in TASKS] and everything[6] == everything[0]
    assert refill_tasks(TASKS, 7, 2, set(), 6) != refill_tasks(TASKS, 7, 1, set(), 6), "a stream per step"
    assert [task_order(TASKS, 7, s, 2) for s in range(4)] == before


def test_tagged_ids_never_collide_with_the_steps_own() -> None:
    task = TASKS[0]
    own = {rollout_id("run", task.id, s, 3, 1) for s in range(4)}
    tagged = {tagged_job("run", 1, task, s, 3, tag).rollout_id for s in range(4) for tag in ("refill1.0", "eval")}
    assert len(tagged) == 8 and not own & tagged
    job = tagged_job("run", 1, task, 0, 3, "eval", {"temperature": 0.0})
    assert (job.step, job.sampling) == (3, {"temperature": 0.0})
    assert job.group_id not in {group_id("run", task.id, 3), tagged_job("run", 1, task, 0, 3, "refill1.0").group_id}


def test_sample_step_refills_until_the_target() -> None:
    """Main groups t0-t2: only t0 has signal; refill round 1 (two groups) adds one more, round 2 (one group) none,
    and the rounds run out (max 2): two groups train."""
    exp = compose(["algo=dapo", "algo.group_size=2", "trainer.tasks_per_step=3", "run.seed=7",
                   "algo.dynamic_sampling_max_rounds=2"]).experiment
    signal = {"t0", *(t.id for t in refill_tasks(TASKS, 7, 0, {"t0", "t1", "t2"}, 2)[:1])}
    ran: list[list[str]] = []

    def run(jobs: list[RolloutJob]) -> list[RolloutResult]:
        ran.append([j.task.id for j in jobs])
        return [RolloutResult(rollout_id=j.rollout_id, task_id=j.task.id, group_id=j.group_id, harness="react",
                              status="ok", reward=float(j.sample) if j.task.id in signal else 1.0) for j in jobs]

    def make(tasks: list[Task]) -> list[RolloutJob]:
        return [RolloutJob(rollout_id("r", t.id, s, 0), t, s, group_id("r", t.id, 0)) for t in tasks for s in range(2)]

    lines: list[str] = []
    jobs, results, sel = sample_step(exp, TASKS, TASKS[:3], 0, "r", 0, run, make, lines.append)
    # round 1 asks for 2 groups (1 of 3 has signal), round 2 for the one still missing
    assert [len(r) for r in ran] == [6, 4, 2] and sel.rounds == 2 and len(jobs) == len(results) == 12
    assert len(sel.kept) == 2 and sel.metrics()["groups"] == 6.0 and sel.metrics()["dynamic_rounds"] == 2.0
    assert lines[0] == "step 1: 1/3 groups with signal; refill round 1: 2 new group(s)"
    assert len({j.rollout_id for j in jobs}) == 12 and {j.step for j in jobs} == {0}
    off = compose(["algo=dapo", "algo.dynamic_sampling=off", "algo.group_size=2", "trainer.tasks_per_step=3"])
    ran.clear()
    _, _, sel = sample_step(off.experiment, TASKS, TASKS[:3], 0, "r", 0, run, make, lines.append)
    assert [len(r) for r in ran] == [6] and len(sel.kept) == 3 and sel.with_signal == 1
