"""``trainer.loggers: [tensorboard]`` (the default): TensorBoard event files in ``RUN/tensorboard``, through torch's
``SummaryWriter`` (``tensorboard --logdir RUN/tensorboard``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from forge_cli.config.loggers import ExperimentLogger


class TensorBoardLogger(ExperimentLogger, name="tensorboard", verl="tensorboard", modules=("torch", "tensorboard"),
                        install="pip install 'forge-rl[train]' (torch and tensorboard)"):
    """Each step's scalars as TensorBoard scalars (tag: the metric's key, step: the step)."""

    @classmethod
    def where(cls, run_dir: Path) -> str:
        return f"tensorboard --logdir {run_dir / 'tensorboard'}"

    def start(self, run_dir: Path, run_name: str, config: Mapping[str, Any]) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter  # lazy: torch and tensorboard, the train extra
        except ImportError:
            raise self.unavailable(", ".join(self.missing()) or "tensorboard") from None
        self.writer = SummaryWriter(str(run_dir / "tensorboard"))

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        for key, value in scalars.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
