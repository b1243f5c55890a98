"""Stand-in trace events (the fields forge writes and the graders read)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class DimensionScores(BaseModel):
    completion: float = 0.0
    robustness: float = 0.0
    communication: float = 0.0
    safety: float = 1.0


class Event(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    trace_id: str = ""


class TraceMessage(Event):
    message: dict[str, Any]

    @property
    def text(self) -> str:
        return "\n".join(b.get("text", "") for b in self.message.get("content", []) if b.get("type") == "text")


class ToolDispatch(Event):
    tool_name: str
    request_body: dict[str, Any] = Field(default_factory=dict)
    response_status: int = 200
    response_body: Any = None


class GradingResult(BaseModel):
    type: str = "grading_result"
    trace_id: str
    task_id: str
    scores: DimensionScores
    task_score: float
    passed: bool
    judge_calls: list[dict[str, Any]] = Field(default_factory=list)
