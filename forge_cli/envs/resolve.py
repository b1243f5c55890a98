"""The step above ``config/`` that knows task sources: an experiment's ``env`` checked against its source.

``forge_cli.config`` validates an experiment without importing any task source (it is a leaf of the package). What
needs the source is done here, for every experiment a command runs:

- ``eval.judge`` reaches a source whose options take a judge: its keys under ``env.options.judge`` (which wins key
  by key: one experiment may judge two envs differently);
- ``env.source`` names a task source (``unknown task source ...`` otherwise) and ``env.options`` are valid for its
  ``Options`` model (``env.options for source '...': ...`` otherwise);
- the harness's ``wire_api`` names a wire format the proxy serves, its ``package.manager`` a registered harness
  installer;
- ``trainer.loggers`` names registered experiment loggers (``forge_cli/config/loggers.py``).

:func:`compose_resolved` composes with both (their problems reported with compose's own, every one at once, as a
:class:`ConfigError`, exit 2); :func:`validate_experiment` does the same for an experiment stored as a dict (a run's
``config.yaml``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from forge_cli.config.compose import MISSING, Composed, compose
from forge_cli.config.loggers import logger_problems
from forge_cli.config.schema import Experiment
from forge_cli.envs.source import source_class
from forge_cli.errors import ConfigError
from forge_cli.harness.installer import installer_class
from forge_cli.proxy.wire import FORMATS


def judge_into_env(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a composed experiment, not yet validated) with ``eval.judge`` merged into ``env.options.judge`` when
    the env's task source takes a judge (the env's own keys win); ``data`` itself is left as it was."""
    env = data.get("env")
    if not isinstance(env, dict):
        return data
    judge = (data.get("eval") or {}).get("judge") if isinstance(data.get("eval"), dict) else None
    if not isinstance(judge, dict) or not judge:
        return data
    try:
        takes_judge = "judge" in source_class(str(env.get("source"))).Options.model_fields
    except ValueError:
        return data  # an unknown source: env_problems says so
    options = env.get("options") or {}
    if not takes_judge or not isinstance(options, dict):
        return data
    own: dict[str, Any] = options["judge"] if isinstance(options.get("judge"), dict) else {}
    merged = {**judge, **{k: v for k, v in own.items() if v is not None}}
    return {**data, "env": {**env, "options": {**options, "judge": merged}}}


def check_options(source: str, options: dict[str, Any]) -> None:
    """ValueError when ``source`` names no task source or ``options`` are not valid for its ``Options`` model."""
    cls = source_class(source)  # ValueError: unknown source
    try:
        cls.Options.model_validate(options)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"env.options for source '{source}': {problems}") from None


def env_problems(data: dict[str, Any]) -> list[str]:
    """What is wrong with the ``env`` of ``data`` (a composed experiment) for its task source, as compose words a
    problem of the env group (``env: ...``); a source or options that are not there or not of the right type at all
    are left to the schema's own check."""
    env = data.get("env")
    if not isinstance(env, dict):
        return []
    source, options = env.get("source"), env.get("options", {})
    if not isinstance(source, str) or source == MISSING or not isinstance(options, dict):
        return []
    try:
        check_options(source, options)
    except ValueError as exc:
        return [f"env: {exc}"]
    return []


def harness_problems(data: dict[str, Any]) -> list[str]:
    """``harness.wire_api`` names a wire format the capture proxy serves (forge_cli/proxy/wire), and
    ``harness.package.manager`` a registered harness installer (forge_cli/harness/installer.py)."""
    from forge_cli.config.schema import WIRE_API_ALIASES

    harness = data.get("harness")
    if not isinstance(harness, dict):
        return []
    problems = []
    wire = harness.get("wire_api")
    if isinstance(wire, str) and wire != MISSING and WIRE_API_ALIASES.get(wire, wire) not in FORMATS:
        problems.append(f"harness: harness.wire_api {wire!r} is not a wire format the capture proxy serves (one of: "
                        f"{', '.join(sorted(FORMATS))})")
    package = harness.get("package")
    manager = package.get("manager") if isinstance(package, dict) else None
    if isinstance(manager, str) and manager != MISSING:
        try:
            installer_class(manager)
        except ValueError as exc:
            problems.append(f"harness: harness.package.manager: {exc}")
    return problems


def trainer_problems(data: dict[str, Any]) -> list[str]:
    """``trainer.loggers`` names registered experiment loggers, each once."""
    trainer = data.get("trainer")
    return logger_problems(trainer.get("loggers")) if isinstance(trainer, dict) else []


def resolve(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """What :func:`forge_cli.config.compose.compose` validates instead of ``data`` (``eval.judge`` merged into the
    env's options), and the problems of the env's options, the harness's wire format and installer and the
    trainer's loggers."""
    merged = judge_into_env(data)
    return merged, env_problems(merged) + harness_problems(merged) + trainer_problems(merged)


def compose_resolved(overrides: list[str] | tuple[str, ...] = (), config_dir: Path | None = None) -> Composed:
    """The experiment of ``overrides`` composed, validated and checked against its task source (ConfigError with
    every problem, exit 2): what a command runs."""
    return compose(overrides, config_dir, resolve=resolve)


def validate_experiment(data: dict[str, Any]) -> Experiment:
    """An experiment stored as a dict (a run's ``config.yaml``) validated and checked against its task source, as
    :func:`compose_resolved` does (pydantic's ValidationError for the schema, ConfigError for the env's options)."""
    merged, problems = resolve(data)
    experiment = Experiment.model_validate(merged)
    if problems:
        raise ConfigError(problems)
    return experiment
