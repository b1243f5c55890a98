"""Harbor-style task directories: ``<task>/instruction.md``, ``task.toml``, ``tests/test.sh``."""

from __future__ import annotations

import tomllib
from pathlib import Path

from forge_cli.config.schema import EnvConfig
from forge_cli.envs.task import Task, TaskSet


def load(env: EnvConfig) -> TaskSet:
    if not env.path:
        return TaskSet.unavailable(env.name, "no task directory configured (set env.path=/path/to/tasks)")
    root = Path(env.path).expanduser()
    if not root.is_dir():
        return TaskSet.unavailable(env.name, f"{root} is not a directory")
    tasks = []
    for task_dir in sorted(p for p in root.iterdir() if (p / "instruction.md").is_file()):
        meta = {}
        if (task_dir / "task.toml").is_file():
            meta = tomllib.loads((task_dir / "task.toml").read_text())
        tasks.append(Task(
            id=task_dir.name,
            instruction=(task_dir / "instruction.md").read_text().strip(),
            # the tests are copied in after the harness exits, so the harness never sees them
            verify="bash /tests/test.sh" if (task_dir / "tests" / "test.sh").is_file() else None,
            metadata={"dir": str(task_dir), "task": meta},
        ))
    if not tasks:
        return TaskSet.unavailable(env.name, f"{root} holds no task directories with an instruction.md")
    return TaskSet(tasks=tasks, available=True, note=f"{len(tasks)} tasks from {root}")
