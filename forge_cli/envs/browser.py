"""``env=browser``: web tasks from a JSONL file, one ``{"id", "url", "instruction", "check"}`` object per line.

``check`` is a shell command run in the sandbox after the harness exits (exit 0: solved), as a ``shell``
verifier; the sandbox image (``env.image``) must hold whatever the check and the harness need (a browser).
"""

from __future__ import annotations

import json
from pathlib import Path

from forge_cli.envs.source import TaskSource
from forge_cli.envs.task import Task
from forge_cli.envs.verifier import parse_verifier
from forge_cli.errors import UserError

FORMAT = '{"id": ..., "url": ..., "instruction": ..., "check": "<shell command>"}'


def existing_path(env_name: str, path: str | None, what: str, example: str, *, is_dir: bool) -> Path:
    """``path`` when it is set and exists (a file or a directory), else a UserError (exit 2) with the fix."""
    if not path:
        raise UserError(f"env '{env_name}' needs its {what}", fix=f"set env.path={example}", exit_code=2)
    resolved = Path(path).expanduser()
    if not (resolved.is_dir() if is_dir else resolved.is_file()):
        raise UserError(f"env.path: {resolved} is not a {'directory' if is_dir else 'file'}",
                        fix=f"set env.path to the {what}, e.g. env.path={example}", exit_code=2)
    return resolved


class BrowserSource(TaskSource, name="browser"):
    def load(self, split: str | None) -> list[Task]:
        path = existing_path(self.env.name, self.env.path, "task file", "/path/to/tasks.jsonl", is_dir=False)
        tasks = []
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                entry = json.loads(line)
                tasks.append(Task(id=str(entry["id"]), instruction=f"{entry['instruction']}\nStart at {entry['url']}",
                                  verifier=parse_verifier(entry.get("check"), where), category="web",
                                  metadata={"url": entry["url"]}))
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise UserError(f"{where}: not a task ({exc})", fix=f"each line is {FORMAT}", exit_code=2) from None
        return tasks
