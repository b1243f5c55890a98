"""Tests of ``forge_cli.eval``: metrics pinned by hand-computed cases, the reports, run comparison.

``trial(...)`` builds one trial dict as ``forge eval`` hands it over (the input contract of
``forge_cli.eval.metrics``), so each test spells out only what it is about.
"""

from __future__ import annotations

from typing import Any


def trial(task_id: str, idx: int, passed: bool | None, reward: float | None = None, *, category: str = "shell",
          status: str = "ok", logs: str = "/tmp/forge-eval-test/logs", **extra: Any) -> dict[str, Any]:
    """One trial dict; ``reward`` defaults to 1.0 for a pass and 0.0 otherwise."""
    if reward is None and passed is not None:
        reward = 1.0 if passed else 0.0
    return {
        "task_id": task_id, "category": category, "trial": idx, "rollout_id": f"{task_id}-t{idx}",
        "status": status, "reward": reward, "passed": passed, "logs": logs, "calls": 3,
        "error": None if status == "ok" else f"{status} happened", "duration_s": 1.5, **extra,
    }


def task_trials(task_id: str, outcomes: list[bool], category: str = "shell") -> list[dict[str, Any]]:
    """One task's trials, trial i passing when ``outcomes[i]``."""
    return [trial(task_id, i, ok, category=category) for i, ok in enumerate(outcomes)]
