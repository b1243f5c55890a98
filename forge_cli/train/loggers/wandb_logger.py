"""``trainer.loggers: [..., wandb]``: a Weights & Biases run, offline by default.

The run goes to ``RUN/wandb/offline-run-<time>-<id>/`` (its ``.wandb`` transaction log: ``wandb leet inspect`` reads
it, ``wandb sync RUN/wandb/offline-run-*`` uploads it later). ``WANDB_MODE=online`` (with ``wandb login`` or
``WANDB_API_KEY``) logs live instead; ``WANDB_PROJECT`` names the project (default ``forge``), ``WANDB_ENTITY`` the
team. The run is named after forge's run and carries the composed experiment as its config.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from forge_cli.config.loggers import ExperimentLogger

PROJECT = "forge"


def wandb_mode() -> str:
    """``WANDB_MODE`` when the user set it, else offline (no network, no account)."""
    return os.environ.get("WANDB_MODE") or "offline"


class WandbLogger(ExperimentLogger, name="wandb", verl="wandb", modules=("wandb",),
                  install="pip install 'forge-rl[loggers]' (or pip install wandb)"):
    """Each step's scalars as one ``run.log(scalars, step=step)``."""

    @classmethod
    def where(cls, run_dir: Path) -> str:
        return f"a W&B run ({wandb_mode()}) in {run_dir / 'wandb'}"

    def start(self, run_dir: Path, run_name: str, config: Mapping[str, Any]) -> None:
        wandb = self.client("wandb")
        # console off: forge's own output stays as it is (W&B would wrap stdout and stderr to record them)
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT") or PROJECT, name=run_name, dir=str(run_dir),
                              mode=wandb_mode(), config=dict(config), reinit="create_new",
                              settings=wandb.Settings(console="off"))

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        self.run.log(dict(scalars), step=step)

    def close(self) -> None:
        self.run.finish()
