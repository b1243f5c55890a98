"""OSWorld tasks from a checkout: ``evaluation_examples/<split>.json`` and ``examples/<domain>/<id>.json``."""

from __future__ import annotations

import json
from pathlib import Path

from forge_cli.config.schema import EnvConfig
from forge_cli.envs.task import Task, TaskSet


def load(env: EnvConfig) -> TaskSet:
    if not env.path:
        return TaskSet.unavailable(env.name, "no OSWorld checkout configured (set env.path=/path/to/OSWorld)")
    examples = Path(env.path).expanduser() / "evaluation_examples"
    index = examples / f"{env.split or 'test_all'}.json"
    if not index.is_file():
        return TaskSet.unavailable(env.name, f"{index} not found (is env.path an OSWorld checkout?)")
    tasks = []
    for domain, ids in json.loads(index.read_text()).items():
        for task_id in ids:
            path = examples / "examples" / domain / f"{task_id}.json"
            if path.is_file():
                spec = json.loads(path.read_text())
                tasks.append(Task(id=f"{domain}/{task_id}", instruction=spec.get("instruction", ""),
                                  verify="<OSWorld evaluator>", metadata={"domain": domain, "spec": str(path)}))
    if not tasks:
        return TaskSet.unavailable(env.name, f"{index} lists no task files that exist")
    return TaskSet(tasks=tasks, available=True, note=f"{len(tasks)} tasks from {index}")
