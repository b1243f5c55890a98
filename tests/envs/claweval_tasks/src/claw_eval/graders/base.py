"""Stand-in AbstractGrader with the helpers the sample graders use."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from ..models.trace import DimensionScores, ToolDispatch, TraceMessage


class AbstractGrader(ABC):
    @abstractmethod
    def grade(self, messages: list[TraceMessage], dispatches: list[ToolDispatch], task: Any,
              audit_data: dict[str, dict] | None = None, judge: Any | None = None) -> DimensionScores: ...

    @staticmethod
    def _get_final_assistant_text(messages: list[TraceMessage]) -> str:
        for msg in reversed(messages):
            if msg.message.get("role") == "assistant":
                return msg.text
        return ""

    @staticmethod
    def compute_robustness(dispatches: list[ToolDispatch]) -> float:
        errors = [d for d in dispatches if d.response_status >= 400]
        return 1.0 if not errors else round(1 - len(errors) / len(dispatches), 2)
