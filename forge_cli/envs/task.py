"""A task and a set of tasks as every task source delivers them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forge_cli.tools.spec import ToolSpec


@dataclass(frozen=True)
class Task:
    """One task: what the harness is told, what its workspace starts with, how it is checked."""

    id: str
    instruction: str
    # files created in the workdir before the harness starts (relative path -> content)
    files: dict[str, str] = field(default_factory=dict)
    # shell commands run in the workdir before the harness starts
    setup: list[str] = field(default_factory=list)
    # shell command run in the workdir after the harness exits (exit 0: reward 1); invisible to it
    verify: str | None = None
    # image for this task (None: the env's image)
    image: str | None = None
    # extra tools the harness gets for this task (over MCP, or a skill file where the harness has no MCP)
    tools: tuple[ToolSpec, ...] = ()
    # initial state of forge's builtin tool services, by service name (e.g. {"mailbox": {"inbox": [...]}})
    tool_state: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TaskSet:
    """The tasks of an env, or why there are none (then one placeholder stands in for plans)."""

    tasks: list[Task]
    available: bool
    note: str

    @classmethod
    def unavailable(cls, env_name: str, reason: str) -> TaskSet:
        placeholder = Task(
            id=f"{env_name}-placeholder",
            instruction=f"<an instruction from the {env_name} task source>",
            verify="<the task's verifier>",
            metadata={"placeholder": True},
        )
        return cls(tasks=[placeholder], available=False, note=reason)


def configured_path(env_name: str, path: str | None, what: str, example: str, *, is_dir: bool) -> Path | TaskSet:
    """``path`` when it is set and exists (a file or a directory), else the TaskSet that says why not."""
    if not path:
        return TaskSet.unavailable(env_name, f"no {what} configured (set env.path={example})")
    resolved = Path(path).expanduser()
    if not (resolved.is_dir() if is_dir else resolved.is_file()):
        return TaskSet.unavailable(env_name, f"{resolved} is not a {'directory' if is_dir else 'file'}")
    return resolved
