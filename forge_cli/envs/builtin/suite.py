"""The generated suite: every registered template instantiated into ``train``, ``val`` and ``test``.

The held-out design (fixed before any figure was read; ``tests/envs/test_builtin_suite.py`` pins it):

- A *seen* template (``held_out`` None) has ``train_per_template`` instances in ``train`` and, as new instances,
  ``val_per_template`` in ``val`` and ``test_per_template`` in ``test``.
- An *unseen* template has instances in one split only: ``held_out="val"`` in ``val``, ``held_out="test"`` in
  ``test``. The two sets of unseen templates are disjoint, so ``val`` (for choosing recipes and templates) never
  sees a task type that ``test`` (read once per reported figure) is scored on as unseen.
- No two tasks of one generation share an instruction (compared after collapsing whitespace), across all three
  splits: a test prompt is never a train prompt, whatever the files behind it.

Seeds: with base seed ``s``, ``train`` draws the seeds s, s+3, s+6, ... of each template, ``val`` s+1, s+4, ...
and ``test`` s+2, s+5, ...; ``train`` is drawn first, then ``val``, then ``test``, and an instance whose instruction
was already drawn is skipped for that template's next seed. Another base seed draws other instances (a repeat of
the learning benchmark passes its own ``env.options.seed``); bases less than ~100 apart share seeds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# the family modules, in the order their tasks are listed; importing one registers its templates
from forge_cli.envs.builtin import answer, create_edit, fix_script, json_csv, multi_step, recovery, search_count
from forge_cli.envs.builtin.template import TEMPLATES, Template
from forge_cli.envs.task import Task

FAMILIES: tuple[str, ...] = tuple(module.FAMILY for module in (create_edit, search_count, json_csv, fix_script,
                                                                multi_step, answer))
# the suites (``env.options.suite``) and their families: core, the default; recovery, tasks whose first obvious
# command fails recoverably (``recovery.py``), kept apart so that core's splits and published figures stay as they are
SUITES: dict[str, tuple[str, ...]] = {"core": FAMILIES, "recovery": (recovery.FAMILY,)}
SPLITS: tuple[str, ...] = ("train", "val", "test")
# draws per wanted instance before a template gives up on finding a new instruction (a tiny parameter space)
_DRAWS_PER_INSTANCE = 20


class BuiltinOptions(BaseModel):
    """``env.options`` of the builtin source (ignored when ``env.path`` names a task file)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # instances of each seen template in `train` (unseen templates have none there)
    train_per_template: int = Field(default=3, ge=0)
    # instances of each seen template, and of each template held out for `val`, in `val`
    val_per_template: int = Field(default=1, ge=0)
    # instances of each seen template, and of each template held out for `test`, in `test`
    test_per_template: int = Field(default=1, ge=0)
    # base seed: another value gives other instances of the same templates
    seed: int = 0
    # which suite: core (6 skill families) or recovery (error recovery: docs/envs/builtin.md)
    suite: Literal["core", "recovery"] = "core"

    def per_template(self, split: str) -> int:
        return {"train": self.train_per_template, "val": self.val_per_template, "test": self.test_per_template}[split]


def templates(suite: str = "core") -> list[Template]:
    """Every template of ``suite``, family by family in its order (:data:`SUITES`), each family's in definition
    order."""
    families = SUITES[suite]
    return sorted((t for t in TEMPLATES.values() if t.suite == suite), key=lambda t: families.index(t.family))


def in_split(template: Template, split: str) -> bool:
    """Whether ``split`` has instances of ``template``: every split for a seen one, its own for an unseen one."""
    return template.held_out is None or template.held_out == split


def normalized(instruction: str) -> str:
    """The instruction with runs of whitespace collapsed: what "the same instruction" is compared on."""
    return " ".join(instruction.split())


def _draw(template: Template, split: str, count: int, options: BuiltinOptions, seen: set[str]) -> Iterator[Task]:
    offset = SPLITS.index(split)
    trained = template.held_out is None and options.train_per_template > 0
    drawn = 0
    for k in range(count * _DRAWS_PER_INSTANCE):
        if drawn == count:
            return
        task = template.task(options.seed + offset + len(SPLITS) * k, split, seen=trained)
        if (key := normalized(task.instruction)) not in seen:
            seen.add(key)
            drawn += 1
            yield task


def generate(options: BuiltinOptions) -> dict[str, list[Task]]:
    """The tasks of each split under ``options`` (deterministic)."""
    seen: set[str] = set()
    out: dict[str, list[Task]] = {split: [] for split in SPLITS}
    for split in SPLITS:
        for template in templates(options.suite):
            if in_split(template, split):
                out[split].extend(_draw(template, split, options.per_template(split), options, seen))
    return out


def load(split: str | None, options: BuiltinOptions) -> list[Task]:
    """The tasks of ``split`` (``train``, ``val``, ``test``; ``all`` or None: all three, in that order)."""
    tasks = generate(options)
    if split is None or split == "all":
        return [task for name in SPLITS for task in tasks[name]]
    return tasks[split]
