"""``RolloutResult``: how one (task x harness x sandbox) rollout ended (docs/architecture.md, data contracts).

A rollout's status starts from how its harness process ended (``ok``, ``agent_error``, ``timeout``; the sandbox or a
service failing: ``infra_error``). Its recorded calls then have the last word (``ending_status``): when the harness
stopped because the policy server refused or failed its call, the agent is not to blame. After the rollout's last
``ok`` call, a call refused as too long for the served context (vLLM's HTTP 400 "maximum context length" /
"longer than the maximum model length") makes it ``over_length``; else a call the policy server did not answer
(connection refused or reset, HTTP 5xx, the proxy's upstream timeout) makes it ``infra_error``, and so does a
replayed call that diverged from its recording (``forge rollout --replay``), wherever it came.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

Status = Literal["ok", "agent_error", "infra_error", "timeout", "over_length"]
STATUSES: tuple[Status, ...] = ("ok", "agent_error", "infra_error", "timeout", "over_length")
# what vLLM (and OpenAI-style servers) answer, with HTTP 400, to a prompt that does not fit the served context
CONTEXT_REFUSAL = re.compile(r"maximum context length|longer than the maximum model length|context_length_exceeded"
                             r"|prompt is too long", re.IGNORECASE)
# what a replay upstream answers a call that no longer matches its recording (forge_cli/replay/server.py)
REPLAY_DIVERGED = "forge replay diverged"
# how RolloutResult.error starts when the policy server did not answer the rollout's last calls
POLICY_SERVER_FAILED = "the policy server did not answer"


@dataclass
class RolloutResult:
    rollout_id: str
    task_id: str
    group_id: str
    harness: str
    # ok: the harness ran to an end; agent_error: it failed; infra_error: the sandbox, a service or the policy
    # server failed; timeout: it ran past its time limit; over_length: the policy server refused its call as too
    # long for the served context (see ending_status)
    status: Status
    # verifier's reward in [0, 1] and the benchmark's own pass rule (None when the rollout was not verified)
    reward: float | None = None
    passed: bool | None = None
    # the verifier's Score: reward, passed, subscores, details
    verifier: dict[str, Any] = field(default_factory=dict)
    # the batch it ran in (training step; eval round), its index in its group, and the task's category
    step: int = 0
    sample: int = 0
    category: str = ""
    # the weight version(s) stamped on its calls by the proxy ("0" before any update; comma-separated if the
    # weights changed during the rollout; None: no call was recorded)
    weight_version: str | None = None
    calls: int = 0
    # its calls per wire format the proxy recorded them in (chat, responses, anthropic, gemini)
    wire_formats: dict[str, int] = field(default_factory=dict)
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
    # its first calls were answered from a recording (forge rollout --replay, forge branch): the sample builder
    # gives their tokens no loss (they were sampled, and trained or not, in the rollout they were recorded in)
    prefix_calls: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RolloutResult:
        """A result read back from results.jsonl (unknown keys of newer versions are ignored)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def refused_as_too_long(call: Mapping[str, Any]) -> bool:
    """A recorded call (CallRecord.to_dict()) that the policy server refused as too long for its context."""
    return (call.get("status") == "upstream_error" and call.get("http_status") in (400, 413)
            and bool(CONTEXT_REFUSAL.search(str(call.get("error") or ""))))


def policy_server_failed(call: Mapping[str, Any]) -> bool:
    """A recorded call the policy server did not answer: no connection, a reset, HTTP 5xx or the upstream timeout
    (the proxy records those as ``upstream_error`` with 502 or the server's own 5xx)."""
    status = call.get("http_status")
    return call.get("status") == "upstream_error" and (status is None or int(status) >= 500)


def ending_status(status: Status, calls: Iterable[Mapping[str, Any]]) -> tuple[Status, str | None]:
    """The rollout's status given its harness status and its recorded calls, and why it changed (None: unchanged).

    Only the calls after the last ``ok`` one count (a harness that recovered from a refused call keeps its own
    status), and only for ``ok``, ``agent_error`` and ``timeout``: an ``infra_error`` stays one.
    """
    if status not in ("ok", "agent_error", "timeout"):
        return status, None
    diverged = next((c for c in calls if REPLAY_DIVERGED in str(c.get("error") or "")), None)
    if diverged is not None:  # a replay whose harness no longer asked what the recording holds: never a sample
        return "infra_error", str(diverged.get("error"))
    ordered = sorted(calls, key=lambda c: int(c.get("seq") or 0))
    last_ok = max((i for i, c in enumerate(ordered) if c.get("status") == "ok"), default=-1)
    tail = ordered[last_ok + 1:]
    refused = next((c for c in tail if refused_as_too_long(c)), None)
    if refused is not None:
        return "over_length", (f"the policy server refused call {refused.get('seq')} as too long for its context "
                               f"({refused.get('error')}); raise model.max_model_len or shorten the harness's prompt")
    failed = next((c for c in reversed(tail) if policy_server_failed(c)), None)
    if failed is not None:
        return "infra_error", (f"{POLICY_SERVER_FAILED} call {failed.get('seq')} "
                               f"(HTTP {failed.get('http_status')}: {failed.get('error')})")
    return status, None
