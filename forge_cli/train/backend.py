"""The ``TrainerBackend`` extension point: who turns a batch of samples into a policy update.

A backend registers by name when its class is defined (``class LocalTrainer(TrainerBackend, kind="local")``);
``trainer.kind`` names it. forge's step loop (``forge_cli/train/loop.py``) calls, per step::

    metrics = backend.train_step(samples)        # samples carry their advantages; one optimizer step
    backend.save(checkpoint_dir)                 # a servable HF directory + optimizer/RNG state
    path = backend.export_weights(directory)     # what the policy server reloads (update_weights)

and ``backend.load(checkpoint_dir)`` on ``--resume``. veRL runs its own step loop and plugs in at the per-rollout
level instead (records -> samples, the algorithm functions); it is not a TrainerBackend.
"""

from __future__ import annotations

import abc
from pathlib import Path
from typing import Any, ClassVar

from forge_cli.errors import UserError
from forge_cli.plugins import Registry
from forge_cli.train.sample import Sample


def backend_class(kind: str) -> type[TrainerBackend]:
    """The backend registered as ``kind``; UserError (exit 2) for one forge's loop cannot run."""
    if kind not in BACKENDS:
        raise UserError(f"trainer '{kind}' is not a forge trainer backend here",
                        fix="trainer=local (trainer=verl runs veRL's own loop: forge_cli/train/verl/launch.py)",
                        exit_code=2)
    return BACKENDS.get(kind)


class TrainerBackend(abc.ABC):
    kind: ClassVar[str] = ""

    def __init_subclass__(cls, kind: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if kind:
            cls.kind = kind
            BACKENDS.add(kind, cls)

    @abc.abstractmethod
    def __init__(self, model_dir: Path, trainer: Any, algo: Any, device: str = "cpu", seed: int = 0) -> None:
        """Load the policy from ``model_dir`` (an HF directory) with the trainer and algorithm settings."""

    @abc.abstractmethod
    def train_step(self, samples: list[Sample]) -> dict[str, float]:
        """One policy update on ``samples`` (advantages set); returns the step's metrics."""

    @abc.abstractmethod
    def save(self, directory: Path) -> None:
        """A checkpoint: HF safetensors model servable as it is, plus optimizer, step and RNG state."""

    @abc.abstractmethod
    def load(self, directory: Path) -> None:
        """Restore a checkpoint written by :meth:`save`."""

    @abc.abstractmethod
    def export_weights(self, directory: Path) -> Path:
        """Write the current weights where the policy server can reload them; returns that directory."""


# the update backends of forge's own step loop by kind (forge_cli/plugins.py): the local trainer found where it lives
# (train/local.py, imported on the first lookup: this module imports no backend); another registers by subclassing
# (its module imported first) or through the entry-point group ``forge.trainer_backends``
BACKENDS: Registry[type[TrainerBackend]] = Registry("trainer backend", TrainerBackend, "forge.trainer_backends",
                                                    own="train/local.py")
