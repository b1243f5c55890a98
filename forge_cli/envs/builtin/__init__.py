"""The ``builtin`` task source: forge's own shell-workspace tasks, generated from seeded templates.

Six skill families (``Task.category``): ``create-edit``, ``search-count``, ``json-csv``, ``fix-script``,
``multi-step`` and ``answer``, one module each; every template of a family turns a seed into a task with a
programmatic verifier (``checks.py``, partial credit where it fits) and a reference solution
(``metadata["solution"]``, a bash script that scores 1.0; doing nothing scores 0.0). Splits ``train``, ``val``
and ``test`` (and ``all``): see ``suite.py`` for the held-out design (seen and unseen templates, no instruction in
two splits) and how seeds are drawn. ``forge eval`` and ``forge rollout`` default to ``test``, ``forge train`` to
``train`` and its own periodic evaluation (``trainer.eval_every``) to ``val``. ``env.options``
(:class:`BuiltinOptions`): ``train_per_template`` (3), ``val_per_template`` (1), ``test_per_template`` (1),
``seed`` (0).
``scripts/builtin-tasks.py`` prints or exports the generated tasks.

With ``env.path`` set the source reads that flat YAML task file instead (``taskfile.py``); its splits are the
ones its entries name, and the options are ignored.
"""

from __future__ import annotations

from functools import cached_property
from typing import ClassVar

from pydantic import BaseModel

from forge_cli.envs.builtin.suite import FAMILIES, SPLITS, BuiltinOptions, generate, load, templates
from forge_cli.envs.builtin.taskfile import TaskFile, read_task_file
from forge_cli.envs.source import Purpose, TaskSource
from forge_cli.envs.task import Task

DEFAULT_SPLITS: dict[str, str] = {"eval": "test", "train": "train", "rollout": "test", "validate": "val"}


class BuiltinSource(TaskSource, name="builtin"):
    """The generated suite, or the flat task file ``env.path``."""

    Options: ClassVar[type[BaseModel]] = BuiltinOptions

    @cached_property
    def task_file(self) -> TaskFile | None:
        """The flat task file named by ``env.path`` (None: the generated suite); read once."""
        return read_task_file(self.env.path) if self.env.path else None

    def splits(self) -> list[str]:
        if self.task_file is not None:
            return self.task_file.splits()
        return [*SPLITS, "all"]

    def default_split(self, purpose: Purpose) -> str | None:
        wanted = DEFAULT_SPLITS[purpose]
        return wanted if wanted in self.splits() else None

    def load(self, split: str | None) -> list[Task]:
        if self.task_file is not None:
            return self.task_file.tasks(split)
        return load(split, self.options)


__all__ = ["FAMILIES", "BuiltinOptions", "BuiltinSource", "TaskFile", "generate", "read_task_file", "templates"]
