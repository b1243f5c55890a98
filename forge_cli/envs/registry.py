"""Load an env's tasks by its ``source``, then apply the id and count filters."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from forge_cli.config.schema import EnvConfig
from forge_cli.envs import browser, builtin, harbor, osworld
from forge_cli.envs.task import TaskSet
from forge_cli.errors import UserError


def _not_yet(suite: str) -> Callable[[EnvConfig], TaskSet]:
    def load(env: EnvConfig) -> TaskSet:
        where = f"{env.path}: " if env.path else f"no {suite} checkout configured (set env.path); "
        return TaskSet.unavailable(env.name, f"{where}reading {suite} tasks arrives with the environments work")

    return load


LOADERS: dict[str, Callable[[EnvConfig], TaskSet]] = {
    "builtin": builtin.load,
    "harbor": harbor.load,
    "osworld": osworld.load,
    "browser": browser.load,
    "claweval": _not_yet("Claw-Eval"),
    "qwenclawbench": _not_yet("QwenClawBench"),
}


def load_tasks(env: EnvConfig, max_tasks: int | None = None) -> TaskSet:
    """The env's tasks, filtered by ``env.task_ids`` and limited by ``env.max_tasks``/``max_tasks``."""
    taskset = LOADERS[env.source](env)
    if not taskset.available:
        return taskset
    tasks = taskset.tasks
    if env.task_ids is not None:
        known = {t.id for t in tasks}
        unknown = [i for i in env.task_ids if i not in known]
        if unknown:
            raise UserError(f"env.task_ids: unknown task id(s) {', '.join(unknown)}",
                            fix=f"known ids: {', '.join(sorted(known))}", exit_code=2)
        tasks = [t for t in tasks if t.id in set(env.task_ids)]
    for limit in (env.max_tasks, max_tasks):
        if limit is not None:
            tasks = tasks[:limit]
    return replace(taskset, tasks=tasks)
