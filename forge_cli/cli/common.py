"""Arguments and helpers shared by the commands that take an experiment."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from forge_cli.config.compose import Composed
    from forge_cli.config.schema import Experiment

Overrides = Annotated[
    list[str] | None,
    typer.Argument(
        help="Hydra overrides: group=option (or +group=option), key=value, e.g. "
        "+harness=codex runtime=docker algo.group_size=8.",
        show_default=False,
    ),
]
ConfigDir = Annotated[
    Path | None,
    typer.Option("--config-dir", help="Extra directory of config groups (harness/, env/, ...) to search."),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of text.")]


def experiment(command: str, overrides: list[str] | None, config_dir: Path | None, resume: Path | None,
               defaults: list[str] | None = None) -> tuple[Experiment, dict[str, Any]]:
    """The experiment of a command that can resume: the one saved in ``resume`` (no overrides allowed then), else
    the composed one (``defaults`` first, the user's overrides after them)."""
    from forge_cli.errors import UserError

    if resume is not None:
        if overrides or config_dir:
            raise UserError("--resume continues the saved experiment: give no overrides with it",
                            fix=f"forge {command} --resume {resume}", exit_code=2)
        return saved_experiment(resume)
    composed = load([*(defaults or []), *(overrides or [])], config_dir)
    return composed.experiment, composed.experiment.model_dump(mode="json")


def saved_experiment(run_dir: Path) -> tuple[Experiment, dict[str, Any]]:
    """The experiment a run was started with (its ``config.yaml``); UserError (exit 2) when there is none."""
    import yaml

    from forge_cli.envs.resolve import validate_experiment
    from forge_cli.errors import UserError

    config = run_dir / "config.yaml"
    if not run_dir.is_dir():
        raise UserError(f"--resume: {run_dir} is not a directory", fix="give the run directory the command printed",
                        exit_code=2)
    if not config.is_file():
        raise UserError(f"--resume: {run_dir} has no config.yaml (not a forge run directory)",
                        fix="give the run directory the command printed at its start", exit_code=2)
    data = yaml.safe_load(config.read_text())
    if not isinstance(data, dict):
        raise UserError(f"--resume: {config} is not an experiment", exit_code=2)
    return validate_experiment(data), data


def load(overrides: list[str] | None, config_dir: Path | None) -> Composed:
    """Compose and validate the experiment, checked against its task source (raises ConfigError with every
    problem)."""
    from forge_cli.envs.resolve import compose_resolved

    return compose_resolved(list(overrides or []), config_dir)
