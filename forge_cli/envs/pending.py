"""Task sources whose benchmark adapter is not built yet: they say so and exit 2, never offering tasks.

A source of this kind exists so that ``env=<name>`` is a known option whose message tells the user what is
missing, instead of a placeholder that would report tasks available and score every rollout 0.
"""

from __future__ import annotations

from typing import ClassVar

from forge_cli.envs.source import TaskSource
from forge_cli.envs.task import Task
from forge_cli.errors import UserError


class PendingSource(TaskSource):
    """A benchmark adapter that is not built yet (subclasses name the benchmark and what is missing)."""

    benchmark: ClassVar[str] = ""
    missing: ClassVar[str] = ""

    def load(self, split: str | None) -> list[Task]:
        raise UserError(f"env '{self.env.name}': running {self.benchmark} tasks is not built yet: {self.missing}",
                        fix="use an env that runs here: env=builtin, or env=harbor env.path=DIR with runtime=docker",
                        exit_code=2)
