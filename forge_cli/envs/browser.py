"""Web tasks from a JSONL file: one ``{"id", "url", "instruction", "check"}`` object per line."""

from __future__ import annotations

import json

from forge_cli.config.schema import EnvConfig
from forge_cli.envs.task import Task, TaskSet, configured_path
from forge_cli.errors import UserError


def load(env: EnvConfig) -> TaskSet:
    path = configured_path(env.name, env.path, "task file", "/path/to/tasks.jsonl", is_dir=False)
    if isinstance(path, TaskSet):
        return path
    tasks = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            tasks.append(Task(id=str(entry["id"]), instruction=f"{entry['instruction']}\nStart at {entry['url']}",
                              verify=entry.get("check"), metadata={"url": entry["url"]}))
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise UserError(f"{path}:{number}: not a task ({exc})",
                            fix='each line is {"id": ..., "url": ..., "instruction": ..., "check": ...}') from None
    return TaskSet(tasks=tasks, available=True, note=f"{len(tasks)} tasks from {path}")
