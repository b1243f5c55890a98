"""Sample grader that raises (forge's bad-input test: an infra error with the traceback, never a 0)."""

from __future__ import annotations

from claw_eval.graders.base import AbstractGrader


class CrashingGrader(AbstractGrader):
    def grade(self, messages, dispatches, task, audit_data=None, judge=None):
        raise RuntimeError("grader lost its rubric")
