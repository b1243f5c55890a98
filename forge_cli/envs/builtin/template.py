"""The template machinery of the builtin suite: a template turns a seeded RNG into one task instance.

A family module defines its templates as functions ``make(rng) -> Instance`` decorated with
``@template(family, difficulty, guided=..., held_out=...)``; registration happens on import, in definition order.
``guided``: the instruction shows the command that solves the task (its reference solution appears in it word for
word; a test checks both ways). ``held_out``: ``"val"`` or ``"test"`` for an *unseen* template, instantiated in
that split only (never in ``train``, never in the other held-out split); None for a *seen* one, instantiated in
every split (``suite.py``). An instance carries
what the harness sees (instruction, files, setup), how it is checked (an async function of
``forge_cli.envs.builtin.checks`` or of the family module, with its expected values as keyword ``args``) and a
reference solution (a bash script run in the workdir) that scores exactly 1.0. The expected values live only
in the verifier's ``args``: never in ``files`` or ``setup`` (the harness could read them there).

:meth:`Template.task` makes the :class:`Task` of one seed; the same template and seed give the same task on
every machine (``random.Random(f"{key}:{seed}")``, never the global RNG).
"""

from __future__ import annotations

import random
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from forge_cli.envs.task import Task
from forge_cli.envs.verifiers import PythonVerifier

Difficulty = Literal["easy", "medium", "hard"]
# the one split an unseen template is instantiated in
HeldOut = Literal["val", "test"]


@dataclass(frozen=True)
class Instance:
    """One generated task before it becomes a :class:`Task`."""

    instruction: str
    # the verifier: an async function ``fn(ctx, **args)`` defined at module level (imported by name later)
    check: Callable[..., Any]
    args: dict[str, Any]
    # a bash script, run in the workdir after files and setup, that solves the task (scores 1.0)
    solution: str
    files: dict[str, str] = field(default_factory=dict)
    setup: tuple[str, ...] = ()
    # answer text the instruction must not contain (a test checks it); the answer itself is in ``args``
    secrets: tuple[str, ...] = ()
    # the first obvious command, which fails in the fresh workspace (the recovery suite's tasks; a test checks it)
    trap: str = ""


Make = Callable[[random.Random], Instance]


@dataclass(frozen=True)
class Template:
    """A registered task template: ``make`` draws one instance from a seeded RNG."""

    family: str
    name: str
    difficulty: Difficulty
    # the instruction shows the command that solves the task
    guided: bool
    # an unseen template's one split (None: a seen template, instantiated in every split)
    held_out: HeldOut | None
    make: Make
    # the suite it belongs to (``env.options.suite``): core, the default, or recovery
    suite: str = "core"

    @property
    def key(self) -> str:
        """``<family>-<template>``: the prefix of every task id of this template."""
        return f"{self.family}-{self.name}"

    def instance(self, seed: int) -> Instance:
        """The instance of ``seed`` (deterministic)."""
        return self.make(random.Random(f"{self.key}:{seed}"))

    def task(self, seed: int, split: str, seen: bool) -> Task:
        """The task of ``seed``: id ``<family>-<template>-<seed>``, reference solution in ``metadata["solution"]``;
        ``seen``: whether the training split has instances of this template."""
        inst = self.instance(seed)
        fn = inst.check
        return Task(
            id=f"{self.key}-{seed}", instruction=inst.instruction, files=dict(inst.files), setup=list(inst.setup),
            verifier=PythonVerifier(f"{fn.__module__}:{fn.__name__}", args=inst.args),
            category=self.family, template=self.key, seen=seen, guided=self.guided,
            metadata={"family": self.family, "template": self.name, "seed": seed, "split": split,
                      "difficulty": self.difficulty, "held_out": self.held_out, "solution": inst.solution,
                      "secrets": list(inst.secrets), **({"trap": inst.trap} if inst.trap else {})})


TEMPLATES: dict[str, Template] = {}


def template(family: str, difficulty: Difficulty, *, guided: bool = False, held_out: HeldOut | None = None,
             suite: str = "core") -> Callable[[Make], Make]:
    """Register the decorated ``make(rng) -> Instance`` as template ``<family>-<function name with dashes>`` of
    ``suite``."""

    def register(make: Make) -> Make:
        entry = Template(family=family, name=make.__name__.replace("_", "-"), difficulty=difficulty,
                         guided=guided, held_out=held_out, make=make, suite=suite)
        if entry.key in TEMPLATES:
            raise ValueError(f"builtin template {entry.key} is defined twice")
        TEMPLATES[entry.key] = entry
        return make

    return register


# ---------------------------------------------------------------- vocabulary shared by the families
WORDS = ("apple", "river", "stone", "cloud", "maple", "tiger", "ocean", "lemon", "piano", "rocket", "garden",
         "silver", "forest", "candle", "window", "planet", "bridge", "copper", "meadow", "falcon", "harbor",
         "pepper", "violet", "marble", "canyon", "orbit", "willow", "ember", "glacier", "lantern", "thunder",
         "saddle", "pebble", "comet", "velvet", "summit", "island", "cactus", "feather", "walnut")
NAMES = ("Alice", "Bruno", "Chloe", "Daniel", "Elena", "Farid", "Grace", "Hiro", "Irene", "Jonas", "Kira",
         "Liam", "Maya", "Nadia", "Oscar", "Priya", "Quinn", "Rosa", "Samir", "Tara", "Umar", "Vera", "Wes",
         "Xena", "Yusuf", "Zoe")
CITIES = ("Paris", "Lima", "Oslo", "Cairo", "Tokyo", "Quito", "Dublin", "Nairobi", "Hanoi", "Lisbon")
STEMS = ("notes", "report", "todo", "summary", "draft", "memo", "plan", "log", "list", "readme")


def words(rng: random.Random, n: int) -> list[str]:
    """``n`` distinct words from :data:`WORDS`."""
    return rng.sample(WORDS, n)


def phrase(rng: random.Random, n: int = 2) -> str:
    """``n`` distinct words and a number, e.g. ``maple river 42``: a text no other instance is likely to share."""
    return " ".join([*words(rng, n), str(rng.randint(10, 99))])


def text(lines: Iterable[str]) -> str:
    """Lines as file content, each ended by a newline."""
    return "".join(f"{line}\n" for line in lines)


def sh(value: str) -> str:
    """``value`` quoted for bash."""
    return shlex.quote(value)


def guided(task: str, command: str) -> str:
    """A guided instruction: the task, then the exact command in a fenced block (the easiest tier: the policy only
    has to carry it out; a 135M model copies such a command in about a quarter of its replies)."""
    return f"{task} Run:\n```bash\n{command}\n```"
