"""Sample grader that asks the LLM judge (left out without one; not judged when it is down)."""

from __future__ import annotations

from claw_eval.graders.base import AbstractGrader
from claw_eval.models.trace import DimensionScores


class JudgedGrader(AbstractGrader):
    def grade(self, messages, dispatches, task, audit_data=None, judge=None):
        return DimensionScores(completion=judge.evaluate(self._get_final_assistant_text(messages)), robustness=1.0)
