"""Harbor-style task directories: ``<task>/instruction.md``, ``task.toml``, ``tests/test.sh``."""

from __future__ import annotations

import tomllib

from forge_cli.config.schema import EnvConfig
from forge_cli.envs.task import Task, TaskSet, configured_path


def load(env: EnvConfig) -> TaskSet:
    root = configured_path(env.name, env.path, "task directory", "/path/to/tasks", is_dir=True)
    if isinstance(root, TaskSet):
        return root
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
