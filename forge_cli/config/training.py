"""Typed settings of ``forge train``: the RL algorithm (configs/algo/) and the trainer backend (configs/trainer/).

Re-exported by :mod:`forge_cli.config.schema`, where the experiment that holds them is defined.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator

from forge_cli.config.fields import Strict
from forge_cli.plugins import Registry


class AlgoConfig(Strict):
    """The RL algorithm of `forge train` (configs/algo/): advantages, policy loss, TIS, KL, DAPO's extras.

    Names follow veRL (``verl.trainer.ppo.core_algos``); ``forge_cli/train/algos.py`` implements the maths.
    """

    name: str
    description: str
    # advantage estimator by registered name: forge's grpo and rloo (forge_cli/train/algos.py), or one a package
    # registers (entry points forge.advantages) or names as pkg.module:function; checked when training starts
    advantage: str
    group_size: Annotated[int, Field(ge=1)] = 4
    norm_adv_by_std: bool = True
    # added to the group's std before dividing (veRL's epsilon)
    epsilon: Annotated[float, Field(gt=0)] = 1e-6
    clip_ratio_low: Annotated[float, Field(ge=0, lt=1)] = 0.2
    clip_ratio_high: Annotated[float, Field(ge=0)] = 0.2
    # dual-clip bound for negative advantages (veRL requires > 1)
    clip_ratio_c: Annotated[float, Field(gt=1)] = 3.0
    # policy loss by registered name (veRL's actor.policy_loss.loss_mode): vanilla (PPO-clip with clip-higher and
    # dual clip), or one a package registers (entry points forge.policy_losses) or names as pkg.module:function
    policy_loss: str = "vanilla"
    # truncated importance sampling: per-token weight min(pi_trainer / pi_rollout, tis_cap); None = off
    tis_cap: Annotated[float, Field(gt=0)] | None = None
    kl_coef: Annotated[float, Field(ge=0)] = 0.0
    kl_penalty: Literal["kl", "abs", "mse", "low_var_kl", "k1", "k2", "k3"] = "low_var_kl"
    loss_agg_mode: Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean",
                           "seq-mean-token-sum-norm"] = "token-mean"
    dynamic_sampling: Literal["off", "drop", "refill"] = "off"
    # refill: at most this many extra generation rounds per step
    dynamic_sampling_max_rounds: Annotated[int, Field(ge=1)] = 3
    # DAPO's soft overlong penalty over the last overlong_buffer_tokens of a call's output limit
    # (model.max_output_tokens), on each rollout's longest completion; 0: off
    overlong_buffer_tokens: Annotated[int, Field(ge=0)] = 0
    overlong_penalty_factor: Annotated[float, Field(ge=0)] = 1.0
    # rollouts that ran past their time limit / that the policy server refused as too long for its context (or
    # with a call longer than trainer.max_seq_len): mask (kept for the group's advantages, no loss tokens), zero
    # (trained with reward 0) or drop (left out before advantages)
    timeout: Literal["mask", "zero", "drop"] = "mask"
    over_length: Literal["mask", "zero", "drop"] = "mask"
    # drop the whole group of a rollout that ended infra_error (else only that rollout)
    drop_group_on_infra: bool = False
    # branching inside training (docs/branching.md): after each step's rollouts, up to branch_rollouts of them that
    # fell short of their group's best reward are forked branch_n times from the state after call branch_at chooses
    # (first-failure: the first call whose prompt carries a failed tool result; random: any call from 1 on), each
    # original with its continuations a group of its own whose shared prefix carries no loss; off: no branching
    branch_at: Literal["off", "first-failure", "random"] = "off"
    branch_n: Annotated[int, Field(ge=1)] = 4
    branch_rollouts: Annotated[int, Field(ge=1)] = 2

    @field_validator("dynamic_sampling", mode="before")
    @classmethod
    def _dynamic_sampling_bool(cls, value: Any) -> Any:
        # YAML 1.1 reads `off` as false (and `on` as true)
        if value is False:
            return "off"
        if value is True:
            return "refill"
        return value

    @field_validator("group_size")
    @classmethod
    def _needs_groups(cls, value: int, info: ValidationInfo) -> int:
        if value < 2:
            advantage = str(info.data.get("advantage", "the advantage")).upper()
            raise ValueError(f"group_size {value}: every advantage would be 0 ({advantage} compares each rollout's "
                             "reward with the others of its task's group); set algo.group_size to 2 or more")
        return value


class LoraSettings(Strict):
    """``trainer.lora``: train LoRA adapters (peft) instead of the full model; vLLM serves them as an adapter."""

    # adapter rank r (vLLM serves ranks up to 512)
    rank: Annotated[int, Field(ge=1, le=512)] = 16
    # scaling numerator: the update is (alpha / rank) * B @ A
    alpha: Annotated[int, Field(ge=1)] = 32
    # dropout on the adapter's input while training (0 keeps the trainer's logprobs equal to the server's)
    dropout: Annotated[float, Field(ge=0, lt=1)] = 0.0
    # linear layers that get adapters (names as in the model, e.g. q_proj; vLLM serves the attention and MLP ones)
    target_modules: Annotated[list[str], Field(min_length=1)] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                                  "up_proj", "down_proj"]


class TrainerConfig(Strict):
    """The trainer backend's options (configs/trainer/): those every backend reads, here; a backend with options of
    its own subclasses this with ``kind="NAME"`` (registered by that name on definition, no central list) and names
    the function that runs ``forge train`` with it (``runner``, ``module:function``). ``trainer.kind`` picks the
    class (``trainer_options``): forge's own live in ``forge_cli/train/<kind>/options.py`` (``local`` below); a
    package's own registers through the entry-point group ``forge.trainers`` (``NAME = "package.module:Class"``),
    loaded when a kind is not registered yet.
    """

    kind: str
    description: str
    steps: Annotated[int, Field(ge=1)] = 10
    # stop after the step in which the policy server has sampled this many completion tokens in all (its own vLLM
    # counters, branch continuations included; trainer.steps stays the upper bound); null: no budget
    max_sampled_tokens: Annotated[int, Field(gt=0)] | None = None
    tasks_per_step: Annotated[int, Field(ge=1)] = 4
    learning_rate: Annotated[float, Field(ge=0)] = 1e-6
    weight_decay: Annotated[float, Field(ge=0)] = 0.0
    max_grad_norm: Annotated[float, Field(gt=0)] = 1.0
    ppo_epochs: Annotated[int, Field(ge=1)] = 1
    # optimizer steps per pass: the step's groups split into this many mini-batches (fewer when there are fewer groups)
    ppo_mini_batches: Annotated[int, Field(ge=1)] = 1
    micro_batch_tokens: Annotated[int, Field(gt=0)] = 4096
    # recompute activations in the backward pass (much less memory, ~30% more compute)
    gradient_checkpointing: bool = True
    # local trainer: a micro-batch's common prefix (a harness's system prompt, a group's first prompt) computed once
    # and its cache shared by the rows (forge_cli/train/prefix.py); not in backward passes with gradient_checkpointing
    share_prefix: bool = True
    # forward/backward numerics: bf16 autocast over float32 weights, gradients and AdamW state ("bf16"), all float32
    # ("float32"), or "auto": bf16 on a GPU that supports it and on CPUs with native bf16 (AVX512-BF16, AMX)
    precision: Literal["auto", "bf16", "float32"] = "auto"
    # longest training sequence; a longer segment loses context from its left, never loss tokens
    max_seq_len: Annotated[int, Field(gt=0)] = 8192
    save_every: Annotated[int, Field(ge=0)] = 0
    # checkpoints kept (the newest)
    keep_checkpoints: Annotated[int, Field(ge=1)] = 2
    # periodic evaluation: every N steps (and after the last) the eval split through the same harness at
    # eval.temperature, eval.trials per task, never trained on (0: off)
    eval_every: Annotated[int, Field(ge=0)] = 0
    # split evaluated (null: the env's validation split, e.g. val for builtin, else its eval split)
    eval_split: str | None = None
    # at most this many tasks of the eval split (null: all)
    eval_max_tasks: Annotated[int, Field(gt=0)] | None = None
    # rollouts of the next step may start while this step's update and weight sync run, as long as no record is
    # generated by weights more than N updates older than those being trained (0: strictly on policy)
    max_staleness: Annotated[int, Field(ge=0)] = 0
    # LoRA adapters instead of full weights (null: full fine-tuning); see LoraSettings
    lora: LoraSettings | None = None
    # experiment loggers each step's metrics go to besides metrics.jsonl, by registered name
    # (forge_cli/config/loggers.py): tensorboard, wandb, mlflow, a package's or pkg.module:Class
    loggers: list[str] = ["tensorboard"]

    # the function that runs forge train with these options (``module:function``), called as
    # ``runner(exp, data, resume=..., dry_run=..., as_json=...)``
    runner: ClassVar[str] = ""
    # what this backend needs on the machine, for forge doctor and its own preflight (``module:function``, called as
    # ``checks(exp)`` -> a list of ``forge_cli.check.Check``; empty: nothing beyond what every run needs)
    checks: ClassVar[str] = ""

    def __init_subclass__(cls, kind: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if kind:
            TRAINERS.add(kind, cls)


# trainer backends by kind (forge_cli/plugins.py): forge's own in forge_cli/train/<kind>/options.py (``local`` below),
# found by where they live; a package's through the entry-point group ``forge.trainers``
TRAINERS: Registry[type[TrainerConfig]] = Registry("trainer backend", TrainerConfig, "forge.trainers",
                                                   own="train/*/options.py")
ENTRY_POINTS = TRAINERS.group


def trainer_options(kind: str) -> type[TrainerConfig]:
    """The options class registered as ``kind``; ValueError naming the registered kinds otherwise."""
    try:
        return TRAINERS.get(kind)
    except ValueError:
        raise ValueError(f"no trainer backend named {kind!r} (registered: {', '.join(TRAINERS.names())}; a "
                         f"package adds one through the entry-point group {ENTRY_POINTS!r})") from None


def validate_trainer(value: Any) -> Any:
    """``trainer`` (a mapping) as its backend's options class, picked by ``kind``."""
    if isinstance(value, TrainerConfig) or not isinstance(value, dict):
        return value
    kind = value.get("kind")
    if not isinstance(kind, str):
        raise ValueError("trainer.kind is required (local, verl, or a backend a package registers)")
    options = trainer_options(kind)
    kept = dict(value)
    registered = TRAINERS.items() if any(key not in options.model_fields for key in value) else []
    for key in value:
        others = [c for _, c in registered if key in c.model_fields and key not in options.model_fields]
        if not others:
            continue
        if all(value[key] == c.model_fields[key].default for c in others):
            # run directories written before the backends had options of their own carry veRL's keys at their
            # defaults in a local trainer's config: read them as they were meant (ignored), so --resume works
            del kept[key]
            continue
        names = ", ".join(k for k, c in registered if c in others)
        raise ValueError(f"trainer.{key} is an option of trainer={names}, not of trainer={kind} (remove it, or "
                         f"choose trainer={names.split(', ')[0]})")
    return options.model_validate(kept)


class LocalTrainerConfig(TrainerConfig, kind="local"):
    """forge's own single-process trainer (``forge_cli/train/loop.py`` with ``train/local.py``'s backend)."""

    runner: ClassVar[str] = "forge_cli.cli.train_cmd:train_local"
