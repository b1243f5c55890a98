"""forge's experiment -> veRL 0.9.1's Hydra config for ``python -m verl.trainer.main_ppo`` (pure; no veRL import).

Every forge option that changes what veRL computes maps to exactly one veRL key (``MAPPING``: docs/verl.md's table is
checked against it); what veRL's V1 path cannot do per rollout is refused (``unsupported``: one message and the fix
each, exit 2) instead of silently computing something else. Keys were read in veRL 0.9.1's
``verl/trainer/config/_generated_ppo_trainer.yaml``; ``tests/train/test_verl_launch.py`` composes the result with
veRL's own Hydra config and builds its typed configs from it, so a renamed key fails a test.

veRL's V1 trainer (``trainer.use_v1``) in ``trainer.v1.trainer_mode=sync``: its weight sync drains in-flight
requests first; the async modes abort them and a harness would see a broken answer.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forge_cli.config.loggers import logger_class
from forge_cli.errors import UserError
from forge_cli.train.verl.options import verl_options

if TYPE_CHECKING:
    from forge_cli.config.schema import Experiment

VERL_VERSION = "0.9.1"
# veRL's config name per actor strategy (verl/trainer/config/)
CONFIG_NAME = {"fsdp": "ppo_trainer", "fsdp2": "ppo_trainer", "megatron": "ppo_megatron_trainer"}
AGENT_NAME = "forge_harness"
# runs in veRL's Ray workers (forge_cli/remote/verl/); the old path, forge_cli.train.verl.agent_loop, is an alias
AGENT_LOOP_TARGET = "forge_cli.remote.verl.agent_loop.ForgeHarnessAgentLoop"
# runs in veRL's trainer process (forge_cli/remote/verl/); forge_cli.train.verl.sampler is an alias of the old path
SAMPLER = ("pkg://forge_cli.remote.verl.sampler", "ForgeReplayBuffer")
# compute_grpo_outcome_advantage's epsilon: a function default, no config key
VERL_GRPO_EPSILON = 1e-6
# veRL's V1 pads a step's rows to a multiple of ppo_mini_batch_size x rollout.n and takes one optimizer step per
# such mini-batch of rows (v1/trainer_base.py _get_required_batch_multiple, _update_actor). A rollout that splits
# is several rows, so forge sets ppo_mini_batch_size to this many rows per rollout: one optimizer step per pass while
# the step's rollouts average at most this many segments (the padding rows carry no loss); past it veRL takes more
SEGMENTS_PER_ROLLOUT = 4

# forge option -> the veRL key it sets (docs/verl.md table; tests check both directions)
MAPPING: list[tuple[str, str]] = [
    ("algo.advantage", "algorithm.adv_estimator"),
    ("algo.norm_adv_by_std", "algorithm.norm_adv_by_std_in_grpo"),
    ("algo.group_size", "actor_rollout_ref.rollout.n"),
    ("algo.clip_ratio_low", "actor_rollout_ref.actor.clip_ratio_low"),
    ("algo.clip_ratio_high", "actor_rollout_ref.actor.clip_ratio_high"),
    ("algo.clip_ratio_c", "actor_rollout_ref.actor.clip_ratio_c"),
    ("algo.policy_loss", "actor_rollout_ref.actor.policy_loss.loss_mode"),
    ("algo.tis_cap", "algorithm.rollout_correction.rollout_is_threshold"),
    ("algo.kl_coef", "actor_rollout_ref.actor.kl_loss_coef"),
    ("algo.kl_penalty", "actor_rollout_ref.actor.kl_loss_type"),
    ("algo.loss_agg_mode", "actor_rollout_ref.actor.loss_agg_mode"),
    ("algo.dynamic_sampling", "algorithm.filter_groups.enable"),
    ("trainer.steps", "trainer.total_training_steps"),
    ("trainer.tasks_per_step", "data.train_batch_size"),
    ("trainer.learning_rate", "actor_rollout_ref.actor.optim.lr"),
    ("trainer.weight_decay", "actor_rollout_ref.actor.optim.weight_decay"),
    ("trainer.max_grad_norm", "actor_rollout_ref.actor.optim.clip_grad"),
    ("trainer.ppo_epochs", "actor_rollout_ref.actor.ppo_epochs"),
    ("trainer.ppo_mini_batches", "actor_rollout_ref.actor.ppo_mini_batch_size"),
    ("trainer.micro_batch_tokens", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu"),
    ("trainer.gradient_checkpointing", "actor_rollout_ref.model.enable_gradient_checkpointing"),
    ("trainer.precision", "actor_rollout_ref.actor.fsdp_config.dtype"),
    ("trainer.max_seq_len", "data.max_response_length"),
    ("trainer.save_every", "trainer.save_freq"),
    ("trainer.keep_checkpoints", "trainer.max_actor_ckpt_to_keep"),
    ("trainer.eval_every", "trainer.test_freq"),
    ("trainer.lora.rank", "actor_rollout_ref.model.lora_rank"),
    ("trainer.lora.alpha", "actor_rollout_ref.model.lora_alpha"),
    ("trainer.lora.target_modules", "actor_rollout_ref.model.target_modules"),
    ("trainer.n_gpus_per_node", "trainer.n_gpus_per_node"),
    ("trainer.nnodes", "trainer.nnodes"),
    ("trainer.strategy", "actor_rollout_ref.actor.strategy"),
    ("trainer.loggers", "trainer.logger"),
    ("rollout.sampling.temperature", "actor_rollout_ref.rollout.temperature"),
    ("rollout.sampling.top_p", "actor_rollout_ref.rollout.top_p"),
    ("rollout.sampling.top_k", "actor_rollout_ref.rollout.top_k"),
    ("rollout.sampling.seed", "actor_rollout_ref.rollout.seed"),
    ("eval.trials", "actor_rollout_ref.rollout.val_kwargs.n"),
    ("eval.temperature", "actor_rollout_ref.rollout.val_kwargs.temperature"),
    ("model.path", "actor_rollout_ref.model.path"),
    ("model.max_model_len", "actor_rollout_ref.rollout.max_model_len"),
    ("run.seed", "data.seed"),
]


@dataclass(frozen=True)
class Serving:
    """How veRL's actor loads the policy and its vLLM replicas serve it (``launch.serving`` reads the machine).

    - ``flash_attn``: ``flash_attn`` imports in veRL's environment. veRL's ``HFModelConfig`` asks transformers for
      ``flash_attention_2`` unless ``override_config.attn_implementation`` says otherwise, and ``verl[vllm]`` does not
      install it: without it the actor uses ``sdpa``. veRL's ``use_remove_padding`` packs a micro-batch's rows into
      one sequence whose positions restart per row; flash-attention's varlen kernel keeps the rows apart, but sdpa
      (transformers 5.10, veRL 0.9.1) attends across them (``tests/train/test_verl_launch.py`` measures it), so it
      is on only with flash-attention.
    - ``served_name``, ``tool_call_parser``, ``chat_template``: as forge's own server (``forge_cli/serve/server.py``)
      serves the model; veRL starts its replicas without tool calling and under the model's path otherwise.
    - ``context``: YaRN model-config overrides when ``model.max_model_len`` exceeds the checkpoint's native context
      (``serve.server.context_extension``), else ``None``. The replicas get them as vLLM's ``hf_overrides``; veRL
      refuses a ``max_model_len`` above the model config's ``max_position_embeddings``, so the actor's config gets
      that length too, while it keeps the checkpoint's RoPE as forge's local trainer does.
    """

    flash_attn: bool = False
    served_name: str = "policy"
    tool_call_parser: str | None = "hermes"
    chat_template: str | None = None
    context: dict[str, Any] | None = None

    def actor_overrides(self) -> dict[str, Any]:
        """``actor_rollout_ref.model.override_config``: what veRL's ``HFModelConfig`` sets on the model config."""
        out: dict[str, Any] = {"attn_implementation": "flash_attention_2" if self.flash_attn else "sdpa"}
        if self.context:
            out["max_position_embeddings"] = self.context["max_position_embeddings"]
        return out

    def engine_kwargs(self) -> dict[str, Any]:
        """``actor_rollout_ref.rollout.engine_kwargs.vllm``: extra ``vllm serve`` arguments of each replica."""
        out: dict[str, Any] = {"served_model_name": self.served_name}
        if self.tool_call_parser:
            out.update(enable_auto_tool_choice=True, tool_call_parser=self.tool_call_parser)
        if self.chat_template:
            out["chat_template"] = self.chat_template
        if self.context:
            out["hf_overrides"] = self.context
        return out


@dataclass(frozen=True)
class Inputs:
    """What forge writes into the run directory for veRL (``launch.write_inputs``) and how the policy is served."""

    run_dir: Path
    model_path: str
    train_files: Path
    val_files: Path
    agent_loops: Path
    num_tasks: int
    has_eval_split: bool
    serving: Serving = Serving()


def unsupported(exp: Experiment) -> list[tuple[str, str]]:
    """What this experiment asks that veRL 0.9.1's V1 path cannot do per rollout: (problem, fix) pairs."""
    a, t = exp.algo, verl_options(exp)
    out: list[tuple[str, str]] = []
    if exp.model.source == "openai-compatible":
        out.append(("model=openai-compatible: veRL trains and serves the policy itself on its GPUs",
                    "model=vllm model.path=<a Hugging Face model directory> (or the default model)"))
    if a.dynamic_sampling == "drop":
        out.append(("algo.dynamic_sampling=drop: veRL's V1 replay buffer evicts uninformative groups and always "
                    "refills them", "algo.dynamic_sampling=refill (veRL's algorithm.filter_groups) or off"))
    if a.drop_group_on_infra:
        out.append(("algo.drop_group_on_infra=true: a veRL agent loop can drop its own rollout, not its group's "
                    "others", "algo.drop_group_on_infra=false"))
    if a.loss_agg_mode.startswith("seq-mean"):
        out.append((f"algo.loss_agg_mode={a.loss_agg_mode}: veRL averages per stored row, and a forge rollout "
                    "that splits into segments is several rows (forge averages per rollout)",
                    "algo.loss_agg_mode=token-mean (the same in both; algo=rloo defaults to seq-mean-token-sum)"))
    if not math.isclose(a.epsilon, VERL_GRPO_EPSILON):
        out.append((f"algo.epsilon={a.epsilon}: veRL's GRPO adds {VERL_GRPO_EPSILON} to the group's std (no key "
                    "sets it)", f"algo.epsilon={VERL_GRPO_EPSILON}"))
    if t.max_staleness:
        out.append((f"trainer.max_staleness={t.max_staleness}: forge maps to veRL's sync mode (its async modes "
                    "abort in-flight requests, which a harness sees as a broken answer)", "trainer.max_staleness=0"))
    if t.micro_batch_tokens < t.max_seq_len:
        out.append((f"trainer.micro_batch_tokens={t.micro_batch_tokens} is below trainer.max_seq_len="
                    f"{t.max_seq_len}: veRL packs whole rows into micro-batches of at most that many tokens",
                    f"trainer.micro_batch_tokens={t.max_seq_len} (or more)"))
    if a.advantage == "rloo":
        out.append(("algo.advantage=rloo: veRL's V1 counts RLOO's leave-one-out baseline over stored rows, and a "
                    "forge rollout that splits into segments is several rows (forge counts rollouts)",
                    "algo=grpo or algo=dapo (GRPO's statistics are per rollout in veRL's V1, as in forge)"))
    elif a.advantage != "grpo":
        out.append((f"algo.advantage={a.advantage}: an estimator registered in forge (forge_cli/train/algos.py) runs "
                    "in forge's own trainer; veRL's workers compute advantages with veRL's registry",
                    "register it with veRL's core_algos.register_adv_est in its workers, or use trainer=local"))
    if a.policy_loss != "vanilla":
        out.append((f"algo.policy_loss={a.policy_loss}: a policy loss registered in forge runs in forge's own "
                    "trainer; veRL's actor looks losses up in veRL's registry",
                    "register it with veRL's core_algos.register_policy_loss in its workers, or use trainer=local"))
    if t.ppo_mini_batches > 1:
        out.append((f"trainer.ppo_mini_batches={t.ppo_mini_batches}: veRL's V1 slices mini-batches by rows after "
                    "reordering them by length (a group is split across them, and a rollout that splits adds "
                    "rows, so the count of optimizer steps varies); forge's local trainer keeps groups whole",
                    "trainer.ppo_mini_batches=1 (one optimizer step per pass; trainer.ppo_epochs for more)"))
    others = [name for name in t.loggers if logger_class(name).verl is None]
    if others:
        kept = [name for name in t.loggers if name not in others]
        out.append((f"trainer.loggers: {', '.join(others)}: veRL's trainer logs through its own trackers (veRL's "
                     "trainer.logger: tensorboard, wandb, mlflow, console, ...), not forge's loggers",
                     f"trainer.loggers=[{','.join(kept)}] (or trainer=local)"))
    if t.strategy == "megatron" and t.lora is not None:
        out.append(("trainer.lora with trainer.strategy=megatron: veRL's LoRA keys are for FSDP",
                    "trainer.strategy=fsdp2"))
    return out


def check_supported(exp: Experiment) -> None:
    """UserError (exit 2) naming every option veRL's V1 path cannot do, each with its fix."""
    problems = unsupported(exp)
    if problems:
        lines = [f"{p} (fix: {f})" for p, f in problems]
        raise UserError("trainer=verl cannot run this experiment as forge's local trainer would:\n  "
                        + "\n  ".join(lines), fix="change the options named above", exit_code=2)


def _total_epochs(exp: Experiment, num_tasks: int) -> int:
    """Epochs over the task table that cover ``trainer.steps`` batches (veRL stops at whichever ends first)."""
    per_epoch = max(1, num_tasks // exp.trainer.tasks_per_step)
    return max(1, math.ceil(exp.trainer.steps / per_epoch))


def overrides(exp: Experiment, inputs: Inputs, *, resume: bool = False) -> dict[str, Any]:
    """veRL's Hydra overrides for this experiment, in a stable order (key -> value; ``None`` is null)."""
    a, t, s = exp.algo, verl_options(exp), exp.rollout.sampling
    fsdp = t.strategy in ("fsdp", "fsdp2")
    temperature = s.temperature if s.temperature is not None else 1.0
    eval_temperature = exp.eval.temperature if exp.eval.temperature is not None else temperature
    out: dict[str, Any] = {
        # the algorithm (forge_cli/train/algos.py names and the same maths)
        "algorithm.adv_estimator": a.advantage,
        "algorithm.norm_adv_by_std_in_grpo": a.norm_adv_by_std,
        "algorithm.use_kl_in_reward": False,
        "algorithm.filter_groups.enable": a.dynamic_sampling == "refill",
        "algorithm.filter_groups.metric": "reward",
        "algorithm.rollout_correction.rollout_is": "token" if a.tis_cap is not None else None,
        "algorithm.rollout_correction.rollout_is_threshold": a.tis_cap if a.tis_cap is not None else 2.0,
        "actor_rollout_ref.actor.policy_loss.loss_mode": a.policy_loss,
        "actor_rollout_ref.actor.clip_ratio_low": a.clip_ratio_low,
        "actor_rollout_ref.actor.clip_ratio_high": a.clip_ratio_high,
        "actor_rollout_ref.actor.clip_ratio_c": a.clip_ratio_c,
        "actor_rollout_ref.actor.loss_agg_mode": a.loss_agg_mode,
        "actor_rollout_ref.actor.use_kl_loss": a.kl_coef > 0,
        "actor_rollout_ref.actor.kl_loss_coef": a.kl_coef,
        "actor_rollout_ref.actor.kl_loss_type": a.kl_penalty,
        "actor_rollout_ref.actor.entropy_coeff": 0,
        # one optimizer step per pass over the step's batch (ppo_mini_batches=1, the only one allowed) while the
        # rollouts average at most SEGMENTS_PER_ROLLOUT rows; use_dynamic_bsz lets it exceed train_batch_size
        "data.train_batch_size": t.tasks_per_step,
        "actor_rollout_ref.actor.ppo_mini_batch_size": t.tasks_per_step * SEGMENTS_PER_ROLLOUT,
        "actor_rollout_ref.actor.ppo_epochs": t.ppo_epochs,
        "actor_rollout_ref.actor.use_dynamic_bsz": True,
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": t.micro_batch_tokens,
        "actor_rollout_ref.actor.optim.lr": t.learning_rate,
        "actor_rollout_ref.actor.optim.weight_decay": t.weight_decay,
        "actor_rollout_ref.actor.optim.clip_grad": t.max_grad_norm,
        "actor_rollout_ref.actor.strategy": t.strategy,
        "actor_rollout_ref.ref.strategy": t.strategy,
        # the policy
        "actor_rollout_ref.model.path": inputs.model_path,
        "actor_rollout_ref.model.enable_gradient_checkpointing": t.gradient_checkpointing,
        "actor_rollout_ref.model.use_remove_padding": inputs.serving.flash_attn,
        "actor_rollout_ref.model.override_config": inputs.serving.actor_overrides(),
    }
    if fsdp:
        out["actor_rollout_ref.actor.fsdp_config.dtype"] = "float32" if t.precision == "float32" else "bfloat16"
    if t.lora is not None:
        out["actor_rollout_ref.model.lora_rank"] = t.lora.rank
        out["actor_rollout_ref.model.lora_alpha"] = t.lora.alpha
        out["actor_rollout_ref.model.target_modules"] = list(t.lora.target_modules)
    out.update({
        # rollouts: veRL's vLLM replicas behind forge's capture proxy, one forge rollout per dataset row
        "actor_rollout_ref.rollout.name": "vllm",
        "actor_rollout_ref.rollout.mode": "async",
        "actor_rollout_ref.rollout.n": a.group_size,
        "actor_rollout_ref.rollout.temperature": temperature,
        "actor_rollout_ref.rollout.top_p": s.top_p if s.top_p is not None else 1.0,
        "actor_rollout_ref.rollout.top_k": s.top_k if s.top_k is not None else -1,
        "actor_rollout_ref.rollout.seed": s.seed if s.seed is not None else exp.run.seed,
        "actor_rollout_ref.rollout.calculate_log_probs": True,
        "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,
        "actor_rollout_ref.rollout.max_model_len": exp.model.max_model_len,
        "actor_rollout_ref.rollout.engine_kwargs.vllm": inputs.serving.engine_kwargs(),
        "actor_rollout_ref.rollout.val_kwargs.n": exp.eval.trials,
        "actor_rollout_ref.rollout.val_kwargs.temperature": eval_temperature,
        "actor_rollout_ref.rollout.val_kwargs.do_sample": eval_temperature > 0,
        "actor_rollout_ref.rollout.agent.agent_loop_config_path": str(inputs.agent_loops),
        "actor_rollout_ref.rollout.agent.default_agent_loop": AGENT_NAME,
        "actor_rollout_ref.rollout.agent.num_workers": t.n_gpus_per_node * t.nnodes,
        # forge's segments are at most trainer.max_seq_len tokens, split anywhere between prompt and response
        "data.train_files": str(inputs.train_files),
        "data.val_files": str(inputs.val_files),
        "data.prompt_key": "prompt",
        "data.max_prompt_length": t.max_seq_len,
        "data.max_response_length": t.max_seq_len,
        "data.filter_overlong_prompts": False,
        "data.return_raw_chat": True,
        "data.shuffle": True,
        "data.seed": exp.run.seed,
        # the run
        "trainer.use_v1": True,
        "trainer.v1.trainer_mode": "sync",
        # a group whose rollouts were all dropped (RolloutDropped) is evicted and refilled, not an empty step
        "trainer.v1.sampler.sync_refill_failed_groups": True,
        # forge's sampler: veRL's sync replay buffer plus forge's rollout counters in each step's metrics
        # (counters.py); it gets the arguments veRL's _build_replay_buffer gives its own sampler
        "trainer.v1.sampler.custom_sampler.path": SAMPLER[0],
        "trainer.v1.sampler.custom_sampler.name": SAMPLER[1],
        "trainer.v1.sampler.sampler_kwargs": {
            "forge_counters_dir": str(inputs.run_dir / "rollouts" / "counters"),
            "filter_groups_metric": "reward" if a.dynamic_sampling == "refill" else None,
            "sync_refill_failed_groups": True, "train_batch_size": t.tasks_per_step, "gen_batch_size": 1,
            "max_inflight_gen_batches": 1},
        "trainer.total_training_steps": t.steps,
        "trainer.total_epochs": _total_epochs(exp, inputs.num_tasks),
        "trainer.save_freq": t.save_every or t.steps,
        "trainer.max_actor_ckpt_to_keep": t.keep_checkpoints,
        "trainer.test_freq": t.eval_every if (t.eval_every and inputs.has_eval_split) else -1,
        "trainer.val_before_train": False,
        "trainer.default_local_dir": str(inputs.run_dir / "checkpoints"),
        "trainer.resume_mode": "auto" if resume else "disable",
        "trainer.project_name": "forge",
        "trainer.experiment_name": inputs.run_dir.name,
        # veRL's own trackers of the same names (forge's loggers declare theirs); console always
        "trainer.logger": ["console", *verl_loggers(t.loggers)],
        "trainer.n_gpus_per_node": t.n_gpus_per_node,
        "trainer.nnodes": t.nnodes,
    })
    return out


def verl_loggers(names: list[str]) -> list[str]:
    """veRL's ``trainer.logger`` names of forge's ``trainer.loggers`` (those veRL has; ``unsupported`` names the
    others)."""
    out = []
    for name in names:
        verl = logger_class(name).verl
        if verl is not None and verl not in out:
            out.append(verl)
    return out


def logger_env(names: list[str], run_dir: Path, environ: dict[str, str]) -> dict[str, str]:
    """The environment veRL's trackers read, as forge's loggers default it: TensorBoard's event files in
    ``RUN/tensorboard``, W&B offline (unless ``WANDB_MODE`` is set) in ``RUN/wandb``, MLflow's store
    ``sqlite:///RUN/mlflow.db`` (unless ``MLFLOW_TRACKING_URI`` is set)."""
    env = {"TENSORBOARD_DIR": str(run_dir / "tensorboard")}
    chosen = set(verl_loggers(names))
    if "wandb" in chosen:
        env["WANDB_DIR"] = str(run_dir)
        if not environ.get("WANDB_MODE"):
            env["WANDB_MODE"] = "offline"
    if "mlflow" in chosen and not environ.get("MLFLOW_TRACKING_URI"):
        env["MLFLOW_TRACKING_URI"] = f"sqlite:///{run_dir.resolve() / 'mlflow.db'}"
    return env


def _value(value: Any) -> str:
    """One value in Hydra's override grammar."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ",".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_value(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if text and all(c.isalnum() or c in "/._-+:@~" for c in text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def hydra_args(mapped: dict[str, Any]) -> list[str]:
    """``key=value`` arguments for ``main_ppo`` (each value in Hydra's grammar). A dict value replaces the whole
    node (``++``: veRL's ``engine_kwargs.vllm`` and ``override_config`` are empty dicts, which Hydra's struct mode
    will not assign to otherwise); the tests read those back through veRL's typed configs, so a renamed node fails."""
    return [f"{'++' if isinstance(value, dict) else ''}{key}={_value(value)}" for key, value in mapped.items()]


def command(python: Path, exp: Experiment, mapped: dict[str, Any]) -> list[str]:
    """The full command line: veRL's environment's Python running ``main_ppo`` with the mapped config."""
    return [str(python), "-m", "verl.trainer.main_ppo", f"--config-name={CONFIG_NAME[verl_options(exp).strategy]}",
            *hydra_args(mapped)]


def shell_line(argv: list[str]) -> str:
    """The command as one copy-pasteable shell line, an argument per line."""
    head = " ".join(shlex.quote(a) for a in argv[:3])  # python -m verl.trainer.main_ppo
    return " \\\n    ".join([head, *(shlex.quote(a) for a in argv[3:])])
