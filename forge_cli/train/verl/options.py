"""``trainer=verl``'s options: the shared trainer options plus where veRL runs (registered as ``verl``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, ClassVar, Literal

from pydantic import Field

from forge_cli.config.training import TrainerConfig

if TYPE_CHECKING:
    from forge_cli.config.schema import Experiment


class VerlTrainerConfig(TrainerConfig, kind="verl"):
    """veRL 0.9.1 on GPUs with forge's rollouts as its agent loop (``forge_cli/train/verl/``, docs/verl.md)."""

    runner: ClassVar[str] = "forge_cli.cli.train_verl:run"
    checks: ClassVar[str] = "forge_cli.train.verl.checks:check_verl"

    # GPUs per node
    n_gpus_per_node: Annotated[int, Field(ge=1)] = 1
    # nodes in the Ray cluster
    nnodes: Annotated[int, Field(ge=1)] = 1
    # the actor's strategy (veRL's actor_rollout_ref.actor.strategy)
    strategy: Literal["fsdp", "fsdp2", "megatron"] = "fsdp"
    # a Ray cluster to run on (RAY_ADDRESS, e.g. ray://head:10001); null: a local Ray on this machine's GPUs
    ray_address: str | None = None


def verl_options(exp: Experiment) -> VerlTrainerConfig:
    """``exp.trainer`` as veRL's options (every caller is on the ``trainer=verl`` path)."""
    if not isinstance(exp.trainer, VerlTrainerConfig):
        raise TypeError(f"trainer={exp.trainer.kind} is not trainer=verl")
    return exp.trainer
