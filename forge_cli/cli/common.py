"""Arguments and helpers shared by the commands that take an experiment."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from forge_cli.config.compose import Composed

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


def load(overrides: list[str] | None, config_dir: Path | None) -> Composed:
    """Compose and validate the experiment (raises ConfigError with every problem)."""
    from forge_cli.config.compose import compose

    return compose(list(overrides or []), config_dir)
