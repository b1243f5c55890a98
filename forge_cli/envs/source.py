"""The ``TaskSource`` extension point: where an env's tasks come from, and how a task is prepared in a sandbox.

A source is a :class:`TaskSource` subclass registered by name when its class is defined
(``class MySource(TaskSource, name="mine")``). ``env.source`` names it: a registered name, a module of this
package of the same name (``forge_cli.envs.<name>``, imported on first use) or a dotted path to a user's own
class (``env.source=my_pkg.tasks:MySource``), so adding one touches no central list. Each source validates its
own options (``env.options``) with its pydantic model ``Options``, at compose time: a typo is a config error.

Contract every implementation keeps (``tests/envs/test_source_conformance.py`` checks each one):

- ``splits()`` lists the named splits; ``default_split(purpose)`` is the one used when ``env.split`` is unset
  (``eval``: the held-out split, ``train``: the training split, ``rollout``: what ``forge rollout`` runs).
- ``load(split)`` returns the tasks of the split, every one with a unique id and a verifier (or ``verifier=None``
  only for tasks that are not scored). A source that cannot run — its checkout is not configured, or reading it
  is not built yet — raises ``UserError`` with the fix and exit code 2; it never returns placeholder tasks.
- ``prepare(sandbox, task)`` makes the task's starting state in a fresh sandbox (files are already written from
  ``task.files``): by default the task's setup commands, each under ``env.setup_timeout_s``. A setup that fails is
  a :class:`SetupError` (an infra error of that rollout).
- ``instruction(task, tool_state)`` is what the harness is told (default ``task.instruction``); it may read the
  rollout's tool state (e.g. the utterance of the page its browser opened).
- ``check_runtime(runtime_kind)`` refuses (exit 2) a runtime the tasks cannot run on; dry runs call it too.
- ``build(tasks, runtime_kind, log)`` runs once before a run (images per task); UserError exit 2 when the
  source cannot run on that runtime, exit 1 when the work failed.
"""

from __future__ import annotations

import abc
import contextlib
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from forge_cli.envs.task import Task
from forge_cli.errors import UserError

if TYPE_CHECKING:
    from forge_cli.config.schema import EnvConfig
    from forge_cli.runtime.base import Sandbox

# what the tasks are loaded for: "validate" is the evaluation a training run makes of itself (trainer.eval_every),
# which chooses checkpoints and recipes and so must not read the split figures are reported on
Purpose = Literal["rollout", "eval", "train", "validate"]
Log = Callable[[str], None]


class SetupError(Exception):
    """A task's setup failed or timed out in the sandbox: the rollout is an infra error."""


class NoOptions(BaseModel):
    """A source without options of its own."""

    model_config = ConfigDict(extra="forbid", frozen=True)


SOURCES: dict[str, type[TaskSource]] = {}


class TaskSource(abc.ABC):
    """Loads an env's tasks and prepares each in a sandbox. Subclass with ``name="..."`` to register."""

    name: ClassVar[str] = ""
    # the source's own options (``env.options``), validated when the experiment is composed
    Options: ClassVar[type[BaseModel]] = NoOptions

    def __init_subclass__(cls, name: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if name:
            cls.name = name
            SOURCES[name] = cls

    def __init__(self, env: EnvConfig) -> None:
        self.env = env
        self.options: Any = self.Options.model_validate(env.options)

    # ------------------------------------------------------------------ tasks
    def splits(self) -> list[str]:
        """The named splits (empty: the source has none and every task is in the one set)."""
        return []

    def default_split(self, purpose: Purpose) -> str | None:
        """The split used when ``env.split`` is unset (for "validate", None falls back to the "eval" split)."""
        return None

    @abc.abstractmethod
    def load(self, split: str | None) -> list[Task]:
        """The tasks of ``split`` (None: the source's only set); UserError (exit 2) when the source cannot run."""

    # ------------------------------------------------------------------ running
    def check_runtime(self, runtime_kind: str) -> None:
        """UserError (exit 2) when the source's tasks cannot run on runtime ``runtime_kind`` at all; checked by dry
        runs too, so that no plan is printed that cannot run."""
        return None

    def build(self, tasks: list[Task], runtime_kind: str, log: Log) -> None:
        """Work done once before a run on runtime ``runtime_kind`` (``local``, ``docker``, ``kubernetes``), e.g.
        building per-task images; UserError with exit 2 when the source cannot run on that runtime, exit 1 when
        the work failed (a build error)."""
        return None

    def image(self, task: Task) -> str:
        """The image a task's sandbox starts from."""
        return task.image or self.env.image

    def instruction(self, task: Task, tool_state: Callable[[], dict[str, Any]]) -> str:
        """What this rollout's harness is told: ``task.instruction``. A source whose instruction is only known once
        the rollout's tools started (a web page's utterance) builds it from ``tool_state()`` (the tool server's
        state of the rollout: services, browser page); raising makes the rollout an infra error."""
        return task.instruction

    async def prepare(self, sandbox: Sandbox, task: Task) -> None:
        """The task's starting state in a fresh sandbox (its files are already written): its setup commands."""
        for command in task.setup:
            result = await sandbox.exec(["bash", "-c", command], timeout=self.env.setup_timeout_s)
            if result.timed_out:
                raise SetupError(f"task setup `{command}` timed out after {self.env.setup_timeout_s}s")
            if not result.ok:
                raise SetupError(f"task setup `{command}` failed (exit {result.exit_code}): {result.stderr[-2000:]}")


def source_class(name: str) -> type[TaskSource]:
    """The TaskSource registered as ``name``, found in ``forge_cli.envs.<name>``, or at a dotted path."""
    if name in SOURCES:
        return SOURCES[name]
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            obj = getattr(importlib.import_module(module_name), attr)
        except Exception as exc:  # the user's module: any error importing it is a config problem
            raise ValueError(f"cannot import task source '{name}' ({type(exc).__name__}: {exc})") from None
        if isinstance(obj, type) and issubclass(obj, TaskSource):
            return obj
        raise ValueError(f"'{name}' is not a TaskSource subclass")
    module = f"forge_cli.envs.{name.replace('-', '_')}"
    if name.replace("-", "_").isidentifier():
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:  # the source exists but needs something missing: say what, not a traceback
                raise ValueError(f"task source '{name}' cannot be imported ({exc})") from None
        except Exception as exc:
            raise ValueError(f"task source '{name}' cannot be imported ({type(exc).__name__}: {exc})") from None
    if name in SOURCES:
        return SOURCES[name]
    raise ValueError(f"unknown task source '{name}' (forge ships: {', '.join(known_sources(strict=False))}; "
                     "or give your own as pkg.module:Class)")


def known_sources(strict: bool = True) -> list[str]:
    """The task sources forge ships (modules of this package that register one); ``strict=False`` leaves out one
    that cannot be imported (for an error message, which must not fail itself) instead of raising."""
    import pkgutil

    import forge_cli.envs as package

    for info in pkgutil.iter_modules(package.__path__):
        if not info.name.startswith("_"):
            with contextlib.suppress(*(() if strict else (Exception,))):
                importlib.import_module(f"forge_cli.envs.{info.name}")
    return sorted(SOURCES)


@dataclass(frozen=True)
class TaskSet:
    """The tasks selected for a run: the split they came from and a one-line note on where they came from."""

    tasks: list[Task]
    split: str | None
    note: str
    source: TaskSource


def open_source(env: EnvConfig) -> TaskSource:
    """The env's task source, constructed with its validated options."""
    try:
        cls = source_class(env.source)
    except ValueError as exc:
        raise UserError(f"env.source: {exc}", exit_code=2) from None
    return cls(env)


def load_tasks(env: EnvConfig, max_tasks: int | None = None, purpose: Purpose = "rollout") -> TaskSet:
    """The env's tasks for ``purpose``: ``env.split`` (else the source's default for the purpose), filtered by
    ``env.task_ids`` and limited by ``env.max_tasks`` / ``max_tasks``. Raises UserError (exit 2) for an unknown
    split or task id, and when the source cannot run."""
    source = open_source(env)
    split = env.split if env.split is not None else source.default_split(purpose)
    if split is None and env.split is None and purpose == "validate":
        split = source.default_split("eval")
    known_splits = source.splits()
    if split is not None and split not in known_splits:
        offered = ", ".join(known_splits) if known_splits else "none: leave env.split unset"
        raise UserError(f"env.split: unknown split '{split}' for env '{env.name}'", fix=f"splits: {offered}",
                        exit_code=2)
    tasks = source.load(split)
    if env.task_ids is not None:
        known = {t.id for t in tasks}
        unknown = [i for i in env.task_ids if i not in known]
        if unknown:
            shown = ", ".join(sorted(known)[:40]) + (" ..." if len(known) > 40 else "")
            raise UserError(f"env.task_ids: unknown task id(s) {', '.join(unknown)}"
                            + (f" in split '{split}'" if split else ""), fix=f"known ids: {shown}", exit_code=2)
        wanted = set(env.task_ids)
        tasks = [t for t in tasks if t.id in wanted]
    for limit in (env.max_tasks, max_tasks):
        if limit is not None:
            tasks = tasks[:limit]
    left_out = getattr(source, "left_out", None)
    left_out = left_out if isinstance(left_out, dict) else {}
    reasons = "; ".join(f"{i}: {w}" for i, w in list(left_out.items())[:3]) + (" ..." if len(left_out) > 3 else "")
    if not tasks:
        why = f" (all {len(left_out)} left out: {reasons})" if left_out else ""
        raise UserError(f"env '{env.name}' has no tasks" + (f" in split '{split}'" if split else "") + why,
                        fix="check env.path, env.split and env.task_ids", exit_code=2)
    where = f"split '{split}'" if split else "all tasks"
    note = f"{len(tasks)} tasks ({where}) from {env.source}"
    # a source that leaves tasks out it cannot run (Claw-Eval, OSWorld) keeps why in `left_out`: the note says so
    if left_out:
        note += f"; {len(left_out)} of the split left out ({reasons})"
    return TaskSet(tasks=tasks, split=split, note=note, source=source)
