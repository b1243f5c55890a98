"""The conformance kit of a trainer backend (``forge_cli/config/training.py``'s ``TrainerConfig``).

    problems = check_trainer("mine")
    assert not problems, problems

It resolves ``kind`` through the registry as ``forge train`` does, then checks what ``forge train`` relies on: the
options class is a ``TrainerConfig`` registered under that kind, validates from the shared trainer options alone
(every option of its own has a default), keeps its own options through a dump and a validation (a run directory's
``config.yaml`` read back by ``--resume``), does not take a name of the shared options for one of its own with
another meaning; its ``runner`` (``module:function``) imports and takes ``forge train``'s arguments; its ``checks``,
when named, import and take the experiment.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

from forge_cli.config.training import TrainerConfig, trainer_options, validate_trainer

# how forge train calls a backend's runner (forge_cli/cli/train_cmd.py)
RUNNER_ARGS = ("exp", "data")
RUNNER_KEYWORDS = ("fitted", "context_note", "resume", "dry_run", "as_json")


def _target(spec: str, what: str) -> tuple[Callable[..., Any] | None, str | None]:
    module, _, name = spec.partition(":")
    if not module or not name:
        return None, f"{what} {spec!r} is not module:function"
    try:
        found = getattr(importlib.import_module(module), name)
    except Exception as exc:
        return None, f"{what} {spec!r} does not import: {type(exc).__name__}: {exc}"
    if not callable(found):
        return None, f"{what} {spec!r} is not callable"
    return found, None


def check_trainer(kind: str, shared: dict[str, Any] | None = None) -> list[str]:
    """Problems of the trainer backend registered as ``kind``; ``shared`` holds shared trainer options a composed
    experiment would give it (default: the shared options' own defaults)."""
    try:
        options = trainer_options(kind)
    except ValueError as exc:
        return [str(exc)]
    problems: list[str] = []
    if not (isinstance(options, type) and issubclass(options, TrainerConfig)):
        return [f"{kind!r} is registered with {options!r}, not a TrainerConfig subclass"]
    base = {name: field.default for name, field in TrainerConfig.model_fields.items() if not field.is_required()}
    values = {**base, "description": f"{kind} (conformance)", **(shared or {}), "kind": kind}
    try:
        made = validate_trainer(values)
    except Exception as exc:
        return [f"the options do not validate from the shared trainer options alone (an option of its own without a "
                f"default?): {type(exc).__name__}: {exc}"]
    if type(made) is not options:
        problems.append(f"trainer.kind={kind} validates into {type(made).__name__}, not {options.__name__}")
    try:
        again = validate_trainer(made.model_dump(mode="json"))
        if again != made:
            problems.append("the options change through a dump and a validation (a run's config.yaml read back)")
    except Exception as exc:
        problems.append(f"the dumped options do not validate again: {type(exc).__name__}: {exc}")
    for name, field in options.model_fields.items():
        shared_field = TrainerConfig.model_fields.get(name)
        if shared_field is not None and field.annotation != shared_field.annotation:
            problems.append(f"trainer.{name} is a shared option; {options.__name__} gives it another type")
    runner, why = _target(options.runner, "runner")
    if why:
        problems.append(why)
    elif runner is not None:
        try:
            inspect.signature(runner).bind(*RUNNER_ARGS, **dict.fromkeys(RUNNER_KEYWORDS))
        except TypeError as exc:
            problems.append(f"runner {options.runner!r} does not take forge train's arguments "
                            f"(exp, data, *, {', '.join(RUNNER_KEYWORDS)}): {exc}")
    if options.checks:
        checks, why = _target(options.checks, "checks")
        if why:
            problems.append(why)
        elif checks is not None:
            try:
                inspect.signature(checks).bind("exp")
            except TypeError as exc:
                problems.append(f"checks {options.checks!r} does not take the experiment: {exc}")
    return problems
