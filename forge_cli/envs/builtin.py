"""forge's own shell-workspace tasks (shipped in builtin_tasks.yaml, or a file of the same form)."""

from __future__ import annotations

from pathlib import Path

import yaml

from forge_cli.config.schema import EnvConfig
from forge_cli.envs.task import Task, TaskSet
from forge_cli.errors import UserError
from forge_cli.tools.spec import parse_tools

SHIPPED = Path(__file__).with_name("builtin_tasks.yaml")


def load(env: EnvConfig) -> TaskSet:
    path = Path(env.path).expanduser() if env.path else SHIPPED
    if not path.is_file():
        return TaskSet.unavailable(env.name, f"task file {path} does not exist")
    try:
        entries = yaml.safe_load(path.read_text()) or []
        tasks = [
            Task(id=str(e["id"]), instruction=str(e["instruction"]), files=dict(e.get("files") or {}),
                 setup=list(e.get("setup") or []), verify=e.get("verify"),
                 tools=parse_tools(e.get("tools"), f"{path}: task {e.get('id')}"),
                 tool_state=dict(e.get("tool_state") or {}))
            for e in entries
        ]
    except (yaml.YAMLError, KeyError, TypeError, AttributeError) as exc:
        raise UserError(f"{path}: not a valid task file ({exc})",
                        fix="each entry needs `id` and `instruction`; see forge_cli/envs/builtin_tasks.yaml") from None
    return TaskSet(tasks=tasks, available=True, note=f"{len(tasks)} tasks from {path}")
