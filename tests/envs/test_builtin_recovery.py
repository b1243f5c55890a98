"""The builtin source's recovery suite (``+env=recovery``, ``env.options.suite=recovery``): tasks whose first obvious
command fails in a way the agent can recover from. Each template's trap (the obvious command) fails in the fresh
workspace, its reference solution scores 1.0 and doing nothing 0.0 (real local sandboxes, bubblewrap where usable);
seen templates are in every split, unseen ones only in theirs; the core suite's splits are untouched."""

from __future__ import annotations

import asyncio

from forge_cli.config.compose import compose
from forge_cli.envs.builtin import BuiltinSource, templates
from forge_cli.envs.source import load_tasks
from forge_cli.envs.task import Task
from forge_cli.runtime.local import LocalSandbox
from forge_cli.runtime.spec import SandboxSpec
from tests.envs.test_builtin_suite import _scores

HOME = "/tmp/forge-home"


def _source() -> BuiltinSource:
    return BuiltinSource(compose(["+env=recovery"]).experiment.env)


def test_the_suite_is_its_own_with_seen_and_unseen_templates() -> None:
    tasks = {split: load_tasks(compose(["+env=recovery", f"env.split={split}"]).experiment.env).tasks
             for split in ("train", "val", "test")}
    assert {s: len(t) for s, t in tasks.items()} == {"train": 12, "val": 6, "test": 7}
    assert {t.category for ts in tasks.values() for t in ts} == {"recovery"}
    seen = {t.template for t in tasks["train"]}
    assert len(seen) == 4 and all(t.seen == (t.template in seen) for ts in tasks.values() for t in ts)
    unseen = {s: {t.template for t in tasks[s]} - seen for s in ("val", "test")}
    assert unseen == {"val": {"recovery-remove-a-directory", "recovery-extract-into-new-dir"},
                      "test": {"recovery-copy-a-directory", "recovery-grep-a-directory", "recovery-move-into-new-dir"}}
    assert len(templates("recovery")) == 9 and not {t.key for t in templates()} & {t.key for t in templates("recovery")}
    assert all(t.metadata["trap"] for ts in tasks.values() for t in ts)


async def _trap_fails(source: BuiltinSource, task: Task) -> tuple[str, int]:
    spec = SandboxSpec(run_id="recovery-traps", rollout_id=task.id, image="forge-base:bookworm", workdir="/work",
                       env={"HOME": HOME}, files=dict(task.files))
    box = await LocalSandbox.create(spec, None)
    try:
        await source.prepare(box, task)
        result = await box.exec(["bash", "-c", task.metadata["trap"]], timeout=30)
        return task.id, result.exit_code
    finally:
        await box.stop()


def test_the_obvious_command_fails_the_solution_scores_one_and_nothing_zero() -> None:
    source = _source()
    tasks = source.load("all")

    async def traps() -> list[tuple[str, int]]:
        return list(await asyncio.gather(*(_trap_fails(source, t) for t in tasks)))

    assert [(i, code) for i, code in asyncio.run(traps()) if code == 0] == [], "a trap that does not fail"
    scores = asyncio.run(_scores(source, [(t, t.metadata["solution"]) for t in tasks] + [(t, None) for t in tasks]))
    solved, untouched = scores[:len(tasks)], scores[len(tasks):]
    assert [t.id for t, s in zip(tasks, solved, strict=True) if (s.reward, s.passed) != (1.0, True)] == []
    assert [t.id for t, s in zip(tasks, untouched, strict=True) if (s.reward, s.passed) != (0.0, False)] == []
