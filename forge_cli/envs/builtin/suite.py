"""The generated suite: every registered template instantiated into a ``train`` and a ``test`` split.

Seeds: with base seed ``s``, ``train`` draws the seeds s, s+2, s+4, ... of each template and ``test`` the seeds
s+1, s+3, ...; an instance whose content (instruction, files, setup) equals one already drawn for either split
is skipped and the next seed of that split is drawn, so no template instance is in both splits (nor twice in
one). Templates marked ``held_out`` are instantiated for ``test`` only: ``test`` also measures templates the
policy never trained on. Compare splits only under the same base seed (the train seeds of ``seed=1`` are the
test seeds of ``seed=0``).
"""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import BaseModel, ConfigDict, Field

# the family modules, in the order their tasks are listed; importing one registers its templates
from forge_cli.envs.builtin import answer, create_edit, fix_script, json_csv, multi_step, search_count
from forge_cli.envs.builtin.template import TEMPLATES, Template
from forge_cli.envs.task import Task

FAMILIES: tuple[str, ...] = tuple(module.FAMILY for module in (create_edit, search_count, json_csv, fix_script,
                                                                multi_step, answer))
SPLITS: tuple[str, ...] = ("train", "test")
# draws per wanted instance before a template gives up on finding new content (a tiny parameter space)
_DRAWS_PER_INSTANCE = 20


class BuiltinOptions(BaseModel):
    """``env.options`` of the builtin source (ignored when ``env.path`` names a task file)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # instances of each template in `train` (held-out templates have none there)
    train_per_template: int = Field(default=3, ge=0)
    # instances of each template in `test`
    test_per_template: int = Field(default=1, ge=0)
    # base seed: another value gives other instances of the same templates
    seed: int = 0


def templates() -> list[Template]:
    """Every template, family by family in :data:`FAMILIES` order, each family's in definition order."""
    return sorted(TEMPLATES.values(), key=lambda t: FAMILIES.index(t.family))


def _fingerprint(task: Task) -> tuple[object, ...]:
    return (task.instruction, tuple(sorted((k, str(v)) for k, v in task.files.items())), tuple(task.setup))


def _draw(template: Template, split: str, count: int, base: int, seen: set[tuple[object, ...]]) -> Iterator[Task]:
    offset = SPLITS.index(split)
    drawn = 0
    for k in range(count * _DRAWS_PER_INSTANCE):
        if drawn == count:
            return
        task = template.task(base + offset + 2 * k, split)
        if (key := _fingerprint(task)) not in seen:
            seen.add(key)
            drawn += 1
            yield task


def generate(options: BuiltinOptions) -> dict[str, list[Task]]:
    """The tasks of each split under ``options`` (deterministic)."""
    seen: set[tuple[object, ...]] = set()
    out: dict[str, list[Task]] = {split: [] for split in SPLITS}
    for split, per_template in (("train", options.train_per_template), ("test", options.test_per_template)):
        for template in templates():
            if not (split == "train" and template.held_out):
                out[split].extend(_draw(template, split, per_template, options.seed, seen))
    return out


def load(split: str | None, options: BuiltinOptions) -> list[Task]:
    """The tasks of ``split`` (``train``, ``test``; ``all`` or None: both, train first)."""
    tasks = generate(options)
    if split is None or split == "all":
        return tasks["train"] + tasks["test"]
    return tasks[split]
