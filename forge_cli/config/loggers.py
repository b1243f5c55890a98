"""Experiment loggers: where ``forge train`` and ``forge sft`` send each step's scalars besides ``metrics.jsonl``.

``trainer.loggers`` names them (default ``[tensorboard]``). forge's own live in ``forge_cli/train/loggers/``:
``tensorboard`` (event files in ``RUN/tensorboard``), ``wandb`` (Weights & Biases, an offline run in ``RUN/wandb``
unless ``WANDB_MODE`` says otherwise) and ``mlflow`` (a local SQLite store ``RUN/mlflow.db`` unless
``MLFLOW_TRACKING_URI`` names another). To add one, subclass :class:`ExperimentLogger` with ``name="<name>"`` in a
module forge finds: ``forge_cli/train/loggers/*.py`` for forge's own, the entry-point group ``forge.loggers`` for a
package's, ``pkg.module:Class`` as the name for a user's own (:mod:`forge_cli.plugins`).

The interface and its registry sit in ``config/`` so that a command checks the names when it composes
(``forge_cli/envs/resolve.py``: an unknown one is a ConfigError, exit 2, naming the registered ones); a logger's
client (torch's SummaryWriter, ``wandb``, ``mlflow``) is imported only when the logger starts, and one that is not
installed is a :class:`~forge_cli.errors.UserError` (exit 2) with the command that installs it, never a traceback.
"""

from __future__ import annotations

import abc
import importlib
import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from forge_cli.errors import UserError
from forge_cli.plugins import Registry

# the extra of forge's own clients (pyproject.toml: [project.optional-dependencies] loggers)
EXTRA = "loggers"


class ExperimentLogger(abc.ABC):
    """One experiment tracker of a training run: :meth:`start` once with the run directory, the run's name and the
    composed experiment (a dict), :meth:`log` once per step with that step's scalars (numbers only, ``metrics.jsonl``'s
    keys), :meth:`close` once at the end (also after a failed run; never after a failed :meth:`start`).

    Calls come from one thread at a time (``MetricsLog`` holds a lock), in increasing step order; a resumed run
    starts a new logger and goes on from the step after the last completed one.
    """

    name: ClassVar[str] = ""
    # the Python modules its client imports (checked before a run starts: forge train fails then, not after a step)
    modules: ClassVar[tuple[str, ...]] = ()
    # what installs them (shown when one is missing)
    install: ClassVar[str] = ""
    # veRL's trainer.logger name for the same tracker (trainer=verl; None: veRL has none)
    verl: ClassVar[str | None] = None

    def __init_subclass__(cls, name: str | None = None, modules: tuple[str, ...] | None = None,
                          install: str | None = None, verl: str | None = None, **kwargs: Any) -> None:
        """``class Mine(ExperimentLogger, name="mine", modules=("client",), install="pip install client")``: the
        class attributes below as keywords; a name registers the class."""
        super().__init_subclass__(**kwargs)
        if modules is not None:
            cls.modules = modules
        if install is not None:
            cls.install = install
        if verl is not None:
            cls.verl = verl
        if name:
            cls.name = name
            LOGGERS.add(name, cls)

    @classmethod
    def where(cls, run_dir: Path) -> str:
        """Where a run in ``run_dir`` goes, in words (``forge train --dry-run``, the docs)."""
        return ""

    @classmethod
    def missing(cls) -> list[str]:
        """The modules of :attr:`modules` that are not installed (found, not imported)."""
        out = []
        for module in cls.modules:
            try:
                found = importlib.util.find_spec(module) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                out.append(module)
        return out

    @classmethod
    def check(cls) -> None:
        """UserError (exit 2) when the client is not installed, with the command that installs it."""
        absent = cls.missing()
        if absent:
            raise cls.unavailable(", ".join(absent))

    @classmethod
    def unavailable(cls, what: str) -> UserError:
        """The error of a logger whose client ``what`` is not installed."""
        return UserError(f"trainer.loggers: the {cls.name} logger needs the Python package(s) {what}, which are not "
                         "installed",
                         fix=f"{cls.install or 'pip install ' + what} (or leave {cls.name} out of trainer.loggers)",
                         exit_code=2)

    def client(self, module: str) -> Any:
        """``module`` imported, or :meth:`unavailable` raised (a logger's :meth:`start` imports its client so)."""
        try:
            return importlib.import_module(module)
        except ImportError:
            raise self.unavailable(module) from None

    @abc.abstractmethod
    def start(self, run_dir: Path, run_name: str, config: Mapping[str, Any]) -> None:
        """Open the run (raising: ``forge train`` stops before its first step with the message)."""

    @abc.abstractmethod
    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        """Record step ``step``'s scalars."""

    def close(self) -> None:  # noqa: B027 (a logger with nothing to flush keeps this one)
        """Flush and finish the run."""


# by name (trainer.loggers): forge's own in forge_cli/train/loggers/, a package's through the entry-point group
# forge.loggers, a user's own as pkg.module:Class
LOGGERS: Registry[type[ExperimentLogger]] = Registry("experiment logger", ExperimentLogger, "forge.loggers",
                                                     own="train/loggers/*.py")


def logger_class(name: str) -> type[ExperimentLogger]:
    """The logger registered as ``name`` (ValueError naming the registered ones)."""
    return LOGGERS.get(name)


def logger_problems(names: Any) -> list[str]:
    """What is wrong with ``trainer.loggers`` (a composed value): names no logger has, or a name twice."""
    if not isinstance(names, list | tuple):
        return []
    problems = []
    for name in names:
        if not isinstance(name, str):
            continue  # the schema's own check says so
        try:
            logger_class(name)
        except ValueError as exc:
            problems.append(f"trainer: trainer.loggers: {exc}")
    twice = sorted({n for n in names if isinstance(n, str) and names.count(n) > 1})
    if twice:
        problems.append(f"trainer: trainer.loggers names {', '.join(twice)} more than once")
    return problems
