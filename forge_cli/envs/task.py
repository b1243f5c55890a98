"""A task as every task source delivers it (see ``forge_cli/envs/source.py`` for where tasks come from)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from forge_cli.tools.spec import ToolSpec

if TYPE_CHECKING:
    from forge_cli.envs.verifier import Verifier


@dataclass(frozen=True)
class Task:
    """One task: what the harness is told, what its workspace starts with, how it is checked."""

    id: str
    instruction: str
    # files created in the workdir before the harness starts (relative path -> content)
    files: dict[str, str | bytes] = field(default_factory=dict)
    # shell commands run in the workdir before the harness starts (each under env.setup_timeout_s)
    setup: list[str] = field(default_factory=list)
    # how the rollout is scored after the harness exits (None: not scored); the harness never sees it
    verifier: Verifier | None = None
    # files written into the sandbox only after the harness exited and its processes were killed (tests,
    # expected outputs): absolute, or relative to the workdir
    hidden_files: dict[str, str | bytes] = field(default_factory=dict)
    # image for this task (None: the env's image)
    image: str | None = None
    # family / domain the task belongs to (reports group by it)
    category: str = ""
    # the task type this task is an instance of (a builtin template, a benchmark's task kind): evaluation intervals
    # resample task types rather than tasks, since instances of one type succeed or fail together (None: the task
    # is a type of its own)
    template: str | None = None
    # whether the training split has tasks of this type: "seen" (True) or "unseen" (False); reports give the two
    # apart (None: not known)
    seen: bool | None = None
    # whether the instruction shows the command that solves the task; reports give guided and other tasks apart
    # (None: not known)
    guided: bool | None = None
    # extra tools the harness gets for this task (over MCP, or a skill file where the harness has no MCP)
    tools: tuple[ToolSpec, ...] = ()
    # initial state of forge's builtin tool services, by service name (e.g. {"mailbox": {"inbox": [...]}})
    tool_state: dict[str, Any] = field(default_factory=dict)
    # per-task limits that override the env's (seconds; None: the env's)
    timeout_s: int | None = None
    verifier_timeout_s: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def verify(self) -> str | None:
        """The verifier in one line (what dry runs show), or None."""
        return self.verifier.describe() if self.verifier is not None else None
