"""``RolloutResult``: how one (task x harness x sandbox) rollout ended (DESIGN.md, data contracts)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Status = Literal["ok", "agent_error", "infra_error", "timeout"]
STATUSES: tuple[Status, ...] = ("ok", "agent_error", "infra_error", "timeout")


@dataclass
class RolloutResult:
    rollout_id: str
    task_id: str
    group_id: str
    harness: str
    # ok: the harness ran to an end; agent_error: it failed; infra_error: the sandbox or a service
    # failed; timeout: it ran past its time limit
    status: Status
    # verifier's reward (None when the rollout could not be verified)
    reward: float | None = None
    verifier: dict[str, Any] = field(default_factory=dict)
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # task tool dispatches (rollouts/<id>/tool_calls.jsonl) and, for tasks with tools, what the tool server saw:
    # {"calls", "errors", "by_tool", "mcp_methods"}
    tool_calls: int = 0
    tools: dict[str, Any] = field(default_factory=dict)
    # seconds per phase: setup, harness, verify, total
    durations: dict[str, float] = field(default_factory=dict)
    # directory with this rollout's harness output and sandbox log
    logs: str = ""
    exit_code: int | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
