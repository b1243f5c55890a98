"""The RL algorithms of `forge train`: advantages, policy losses, TIS, KL and DAPO's extras, as pure tensor functions.

Names, arguments and maths follow veRL 0.9.1 so that forge's local trainer and its veRL backend train the same
objective (``tests/train/test_verl_parity.py`` runs veRL's own functions on the same tensors):

- ``verl/trainer/ppo/core_algos.py``: ``compute_grpo_outcome_advantage``, ``compute_rloo_outcome_advantage``,
  ``register_adv_est`` / ``get_adv_estimator_fn``, ``compute_policy_loss_vanilla`` (PPO-clip with clip-higher and
  dual clip), ``register_policy_loss`` / ``get_policy_loss_fn``, ``agg_loss``, ``kl_penalty``;
- ``verl/trainer/ppo/rollout_corr_helper.py``: ``compute_rollout_correction_weights`` (token / sequence TIS);
- ``verl/workers/reward_manager/dapo.py``: the overlong buffer penalty (``overlong_reward_shaping``);
- ``verl/trainer/ppo/v1/replay_buffer.py``: DAPO's group filter (``dynamic_sampling_filter``);
- ``verl/trainer/ppo/v1/utils.py``: one advantage per agent-loop session broadcast to its outputs
  (``rollout_advantages``: forge's rollouts have several segments, each one row of the batch).

Tensors are ``(batch, response_length)`` unless stated: one row per segment, ``response_mask`` 1 on tokens the
policy sampled. Nothing here reads configs or touches a model; callers pass numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from forge_cli.plugins import Registry

AdvantageFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]
PolicyLossFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]

# by name (algo.advantage, algo.policy_loss): forge's below, a package's through the entry-point groups (a module
# whose import registers them with the decorators, or the function itself), a user's own as pkg.module:function
ADVANTAGES: Registry[AdvantageFn] = Registry("advantage estimator", None, "forge.advantages")
POLICY_LOSSES: Registry[PolicyLossFn] = Registry("policy loss", None, "forge.policy_losses")
# veRL's aggregation modes; forge's config offers all but token-sum
LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
# veRL's KL estimators (a trailing "+" keeps the value and takes k2's gradient)
KL_PENALTIES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
DYNAMIC_SAMPLING_MODES = ("off", "drop", "refill")
# log-ratios are clamped to +-20 before exp, as veRL does (exp(20) ~ 4.9e8)
_LOG_RATIO_BOUND = 20.0


def register_adv_est(name: str) -> Callable[[AdvantageFn], AdvantageFn]:
    """Decorator: register an advantage estimator under ``name`` (a second, different function is an error).

    An estimator takes veRL's arguments: ``(token_level_rewards, response_mask, index, epsilon=...,
    norm_adv_by_std_in_grpo=..., config=None, **kwargs)`` (rows x tokens; ``index[i]`` names row i's group) and
    returns ``(advantages, returns)`` of the rewards' shape; ``forge_cli.testing.advantage`` is its conformance kit.
    """

    def decorator(fn: AdvantageFn) -> AdvantageFn:
        if ADVANTAGES.registered(name) not in (None, fn):
            raise ValueError(f"advantage estimator {name!r} is already registered")
        ADVANTAGES.add(name, fn)
        return fn

    return decorator


def get_adv_estimator_fn(name: str) -> AdvantageFn:
    """The estimator registered as ``name`` (ValueError naming the registered ones)."""
    return ADVANTAGES.get(name)


def register_policy_loss(name: str) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Decorator: register a policy loss under ``name`` (veRL's ``actor.policy_loss.loss_mode``), called as
    ``fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config=PolicyLossConfig,
    rollout_is_weights=..., loss_weights=...)`` -> ``(loss, metrics)`` (``compute_policy_loss_vanilla``'s)."""

    def decorator(fn: PolicyLossFn) -> PolicyLossFn:
        POLICY_LOSSES.add(name, fn)
        return fn

    return decorator


def get_policy_loss_fn(name: str) -> PolicyLossFn:
    """The policy loss registered as ``name`` (ValueError naming the registered ones)."""
    return POLICY_LOSSES.get(name)


# ---------------------------------------------------------------- advantages
def _group_stats(scores: torch.Tensor, index: Iterable[Hashable]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row: its group's mean, unbiased std (as ``torch.std``) and size; a group of one has mean 0 and std 1."""
    codes: dict[Hashable, int] = {}
    group = torch.tensor([codes.setdefault(key, len(codes)) for key in index], dtype=torch.long)
    if group.numel() != scores.shape[0]:
        raise ValueError(f"index has {group.numel()} entries for {scores.shape[0]} rows")
    zeros = torch.zeros(len(codes), dtype=scores.dtype)
    count = zeros.index_add(0, group, torch.ones_like(scores))
    mean = zeros.index_add(0, group, scores) / count
    squares = zeros.index_add(0, group, (scores - mean[group]) ** 2)
    std = torch.sqrt(squares / (count - 1).clamp_min(1))
    single = count == 1
    mean = torch.where(single, torch.zeros_like(mean), mean)
    std = torch.where(single, torch.ones_like(std), std)
    return mean[group], std[group], count[group]


@register_adv_est("grpo")
def compute_grpo_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                   index: Iterable[Hashable], epsilon: float = 1e-6,
                                   norm_adv_by_std_in_grpo: bool = True, config: Any = None,
                                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO on outcome rewards: ``(r - mean_g) / (std_g + epsilon)`` (or ``r - mean_g``: Dr. GRPO), per token.

    ``r`` is each row's reward summed over its tokens; ``index[i]`` names row i's group. ``std_g`` is unbiased
    (``torch.std``). A group of one row keeps its reward (veRL's rule: mean 0, std 1). Returns ``(advantages,
    returns)``, both the row's scalar times ``response_mask``. ``config`` is accepted for veRL's signature.
    """
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        mean, std, _ = _group_stats(scores, index)
        scalars = (scores - mean) / (std + epsilon) if norm_adv_by_std_in_grpo else scores - mean
        advantages = scalars.unsqueeze(-1) * response_mask
    return advantages, advantages


@register_adv_est("rloo")
def compute_rloo_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                   index: Iterable[Hashable], epsilon: float = 1e-6, config: Any = None,
                                   **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO: a row's reward minus the mean of the other rows of its group, ``(r - mean_g) * n / (n - 1)``.

    A group of one row keeps its reward (veRL's rule). ``epsilon`` and ``config`` are unused (veRL's signature).
    """
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        mean, _, count = _group_stats(scores, index)
        scalars = torch.where(count > 1, (scores - mean) * count / (count - 1).clamp_min(1), scores)
        advantages = scalars.unsqueeze(-1) * response_mask
    return advantages, advantages


def rollout_advantages(rewards_by_rollout: Mapping[str, float], group_of_rollout: Mapping[str, str],
                       mode: str = "grpo", norm_by_std: bool = True, epsilon: float = 1e-6) -> dict[str, float]:
    """One advantage per rollout, computed over rollouts (never over segments) and grouped by group id.

    A rollout with many segments counts once in its group's statistics; every segment of it then carries this
    one advantage (veRL's V1 trainer does the same with the final output of each agent-loop session). ``mode``
    is a registered estimator (``grpo``, ``rloo``, or a package's); ``norm_by_std`` is GRPO's std normalisation
    (RLOO ignores it).
    Computed in float64. Raises ValueError for a rollout without a group.
    """
    ids = list(rewards_by_rollout)
    missing = [rollout for rollout in ids if rollout not in group_of_rollout]
    if missing:
        raise ValueError(f"rollouts without a group id: {', '.join(missing[:5])}")
    rewards = torch.tensor([[float(rewards_by_rollout[rollout])] for rollout in ids], dtype=torch.float64)
    index = [group_of_rollout[rollout] for rollout in ids]
    # every estimator gets veRL's keywords (one that does not normalise by the std ignores it, as RLOO does)
    advantages, _ = get_adv_estimator_fn(mode)(rewards, torch.ones_like(rewards), index, epsilon=epsilon,
                                               norm_adv_by_std_in_grpo=norm_by_std, config=None)
    return {rollout: float(value) for rollout, value in zip(ids, advantages[:, 0].tolist(), strict=True)}


# ---------------------------------------------------------------- loss aggregation
def _masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    valid = torch.where(mask.bool(), values, torch.zeros_like(values))  # NaN outside the mask must not leak in
    return (valid * mask).sum() if dim is None else (valid * mask).sum(dim=dim)


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return _masked_sum(values, mask) / (mask.sum() + 1e-8)


def agg_loss(loss_mat: torch.Tensor, loss_mask: torch.Tensor, loss_agg_mode: str, dp_size: int = 1,
             batch_num_tokens: int | torch.Tensor | None = None, global_batch_size: int | torch.Tensor | None = None,
             loss_scale_factor: float | None = None) -> torch.Tensor:
    """Aggregate a token loss matrix into a scalar, as veRL does.

    - ``token-mean``: sum over valid tokens / ``batch_num_tokens`` (default: this batch's valid tokens);
    - ``token-sum``: sum over valid tokens;
    - ``seq-mean-token-sum``: each row's token sum, averaged over rows with at least one valid token
      (``global_batch_size``, default: those rows of this batch);
    - ``seq-mean-token-sum-norm``: the same divided by ``loss_scale_factor`` (default: ``loss_mask.shape[-1]``);
    - ``seq-mean-token-mean``: each row's token mean (``sum / (n + 1e-8)``), averaged over non-empty rows.

    Every mode is multiplied by ``dp_size`` (data-parallel ranks average gradients). Pass the global
    ``batch_num_tokens`` / ``global_batch_size`` when a batch is split into micro-batches whose losses are summed.
    An all-masked batch gives 0 (veRL: NaN). A row is a segment here; ``token_loss_weights`` makes it a rollout.
    """
    if loss_agg_mode == "token-mean":
        denominator = loss_mask.sum().clamp_min(1) if batch_num_tokens is None else batch_num_tokens
        return _masked_sum(loss_mat, loss_mask) / denominator * dp_size
    if loss_agg_mode == "token-sum":
        return _masked_sum(loss_mat, loss_mask) * dp_size
    if loss_agg_mode in ("seq-mean-token-sum", "seq-mean-token-sum-norm", "seq-mean-token-mean"):
        tokens = loss_mask.sum(dim=-1)
        seq_losses = _masked_sum(loss_mat, loss_mask, dim=-1)
        if loss_agg_mode == "seq-mean-token-mean":
            seq_losses = seq_losses / (tokens + 1e-8)
        seq_mask = (tokens > 0).to(loss_mat.dtype)
        sequences = seq_mask.sum().clamp_min(1) if global_batch_size is None else global_batch_size
        loss = _masked_sum(seq_losses, seq_mask) / sequences * dp_size
        if loss_agg_mode == "seq-mean-token-sum-norm":
            loss = loss / (loss_mask.shape[-1] if loss_scale_factor is None else loss_scale_factor)
        return loss
    raise ValueError(f"unknown loss_agg_mode {loss_agg_mode!r} (known: {', '.join(LOSS_AGG_MODES)})")


def token_loss_weights(loss_mask: torch.Tensor, loss_agg_mode: str, sequence_index: Sequence[Hashable] | None = None,
                       loss_scale_factor: float | None = None) -> torch.Tensor:
    """Per-token weights ``w`` with ``(loss_mat * w).sum() == agg_loss(...)`` where a sequence is a rollout.

    Rows sharing ``sequence_index`` (the segments of one rollout) form one sequence: ``seq-mean-*`` averages over
    rollouts, so a rollout with many segments weighs as much as one with a single segment, and
    ``seq-mean-token-mean`` takes the token mean over all segments of the rollout. ``sequence_index=None`` (one
    sequence per row) reproduces ``agg_loss`` exactly. Compute the weights once for the whole batch, then split
    them with the rows: summing micro-batch losses ``(loss_mat * w).sum()`` gives the batch loss. Rollouts with no
    valid token do not count; weights are 0 outside the mask.
    """
    mask = loss_mask.to(torch.float64)
    if loss_agg_mode == "token-mean":
        weights = mask / mask.sum().clamp_min(1)
    elif loss_agg_mode == "token-sum":
        weights = mask
    elif loss_agg_mode in ("seq-mean-token-sum", "seq-mean-token-sum-norm", "seq-mean-token-mean"):
        index = range(mask.shape[0]) if sequence_index is None else sequence_index
        codes: dict[Hashable, int] = {}
        seq = torch.tensor([codes.setdefault(key, len(codes)) for key in index], dtype=torch.long)
        if seq.numel() != mask.shape[0]:
            raise ValueError(f"sequence_index has {seq.numel()} entries for {mask.shape[0]} rows")
        tokens = torch.zeros(len(codes), dtype=mask.dtype).index_add(0, seq, mask.sum(dim=-1))
        sequences = (tokens > 0).sum().clamp_min(1)
        weights = mask / sequences
        if loss_agg_mode == "seq-mean-token-mean":
            weights = weights / (tokens[seq] + 1e-8).unsqueeze(-1)
        if loss_agg_mode == "seq-mean-token-sum-norm":
            weights = weights / (mask.shape[-1] if loss_scale_factor is None else loss_scale_factor)
    else:
        raise ValueError(f"unknown loss_agg_mode {loss_agg_mode!r} (known: {', '.join(LOSS_AGG_MODES)})")
    return weights.to(loss_mask.dtype if loss_mask.is_floating_point() else torch.float32)


# ---------------------------------------------------------------- policy loss
@dataclass(frozen=True)
class PolicyLossConfig:
    """What ``compute_policy_loss_vanilla`` reads (veRL reads the same names from its ``ActorConfig``).

    ``clip_ratio_low`` / ``clip_ratio_high`` default to ``clip_ratio``; ``clip_ratio_c`` (> 1) is the dual-clip
    bound; ``global_batch_info`` holds ``agg_loss``'s ``dp_size`` / ``batch_num_tokens`` / ``global_batch_size``.
    """

    clip_ratio: float = 0.2
    clip_ratio_low: float | None = None
    clip_ratio_high: float | None = None
    clip_ratio_c: float = 3.0
    global_batch_info: Mapping[str, Any] = field(default_factory=dict)


@register_policy_loss("vanilla")
def compute_policy_loss_vanilla(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                                response_mask: torch.Tensor, loss_agg_mode: str = "token-mean",
                                config: PolicyLossConfig | None = None, rollout_is_weights: torch.Tensor | None = None,
                                loss_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO-clip with decoupled bounds (DAPO's clip-higher) and dual clip, per token, then aggregated.

    ``ratio = exp(clamp(log_prob - old_log_prob, -20, 20))``; token loss ``max(-A * ratio, -A * clip(ratio,
    1 - clip_ratio_low, 1 + clip_ratio_high))``, and for ``A < 0`` at most ``-A * clip_ratio_c``. ``old_log_prob`` is
    the policy the batch is measured against: the rollout engine's logprobs (veRL's bypass mode), or the trainer's
    own recomputed at the start of the step when TIS corrects the engine mismatch. ``rollout_is_weights`` (TIS,
    detached) multiply the token losses. ``loss_weights`` (forge: ``token_loss_weights``) replace ``agg_loss``:
    the loss is then ``sum(token_loss * loss_weights)`` over the mask. Returns ``(loss, metrics)`` with veRL's keys
    ``actor/pg_clipfrac``, ``actor/ppo_kl`` and ``actor/pg_clipfrac_lower``.
    """
    config = config or PolicyLossConfig()
    low = config.clip_ratio if config.clip_ratio_low is None else config.clip_ratio_low
    high = config.clip_ratio if config.clip_ratio_high is None else config.clip_ratio_high
    if config.clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be > 1 for dual-clip PPO, got {config.clip_ratio_c}")
    log_ratio = torch.clamp(log_prob - old_log_prob, min=-_LOG_RATIO_BOUND, max=_LOG_RATIO_BOUND)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1 - low, 1 + high)
    clip_loss = torch.maximum(unclipped, clipped)
    dual_bound = -advantages * config.clip_ratio_c
    token_losses = torch.where(advantages < 0, torch.minimum(dual_bound, clip_loss), clip_loss)
    if rollout_is_weights is not None:
        token_losses = token_losses * rollout_is_weights
    if loss_weights is not None:
        loss = _masked_sum(token_losses * loss_weights, response_mask)
    else:
        loss = agg_loss(token_losses, response_mask, loss_agg_mode, **dict(config.global_batch_info))
    with torch.no_grad():
        metrics = {
            "actor/pg_clipfrac": _masked_mean(torch.gt(clipped, unclipped).float(), response_mask).item(),
            "actor/ppo_kl": _masked_mean(-log_ratio, response_mask).item(),
            "actor/pg_clipfrac_lower": _masked_mean(
                (torch.gt(clip_loss, dual_bound) & (advantages < 0)).float(), response_mask).item(),
        }
    return loss, metrics


def compute_policy_loss(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                        response_mask: torch.Tensor, cliprange: float | None = None,
                        cliprange_low: float | None = None, cliprange_high: float | None = None,
                        clip_ratio_c: float = 3.0, loss_agg_mode: str = "token-mean",
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """veRL's older signature of the same loss: ``(pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower)``."""
    low = cliprange if cliprange_low is None else cliprange_low
    high = cliprange if cliprange_high is None else cliprange_high
    if low is None or high is None:
        raise ValueError("compute_policy_loss needs cliprange or both cliprange_low and cliprange_high")
    config = PolicyLossConfig(clip_ratio=low, clip_ratio_low=low, clip_ratio_high=high, clip_ratio_c=clip_ratio_c)
    loss, m = compute_policy_loss_vanilla(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config)
    return (loss, torch.tensor(m["actor/pg_clipfrac"]), torch.tensor(m["actor/ppo_kl"]),
            torch.tensor(m["actor/pg_clipfrac_lower"]))


# ---------------------------------------------------------------- truncated importance sampling
def compute_rollout_correction_weights(log_ratio: torch.Tensor, response_mask: torch.Tensor,
                                       rollout_is: str = "token", rollout_is_threshold: float = 2.0,
                                       ) -> tuple[torch.Tensor, dict[str, float]]:
    """Truncated importance sampling (TIS) weights for the gap between trainer and rollout engine.

    ``log_ratio = trainer_log_prob - rollout_log_prob`` per token. ``rollout_is="token"``: each token's weight is
    ``min(exp(log_ratio), threshold)``; ``"sequence"``: every token of a row gets ``min(exp(sum of the row's
    masked log_ratio), threshold)``. Log-ratios are clamped to +-20 before exp; weights are 0 outside the mask and
    detached (they reweight the loss, they are not optimised). Returns ``(weights, metrics)``: the mean weight over
    valid tokens before and after truncation and the fraction of valid tokens truncated.
    """
    if rollout_is_threshold <= 0:
        raise ValueError(f"rollout_is_threshold must be positive, got {rollout_is_threshold}")
    with torch.no_grad():
        if rollout_is == "token":
            raw = torch.exp(torch.clamp(log_ratio, min=-_LOG_RATIO_BOUND, max=_LOG_RATIO_BOUND))
        elif rollout_is == "sequence":
            total = _masked_sum(log_ratio, response_mask, dim=-1).unsqueeze(-1)
            raw = torch.exp(torch.clamp(total, min=-_LOG_RATIO_BOUND, max=_LOG_RATIO_BOUND)).expand_as(log_ratio)
        else:
            raise ValueError(f"unknown rollout_is {rollout_is!r} (token or sequence)")
        raw = raw * response_mask
        weights = raw.clamp(max=rollout_is_threshold)
        metrics = {
            "rollout_corr/rollout_is_mean_raw": _masked_mean(raw, response_mask).item(),
            "rollout_corr/rollout_is_mean": _masked_mean(weights, response_mask).item(),
            "rollout_corr/rollout_is_truncated_frac": _masked_mean((raw > rollout_is_threshold).float(),
                                                                   response_mask).item(),
        }
    return weights.detach(), metrics


def tis_weights(trainer_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor,
                tis_cap: float | None) -> torch.Tensor | None:
    """Token-level TIS as forge's ``algo.tis_cap`` configures it: ``min(pi_trainer / pi_rollout, cap)``; None = off.

    ``trainer_log_prob`` is the trainer's logprob of each sampled token under the weights that generated the batch
    (recomputed at the start of the step, no gradient); ``rollout_log_prob`` is what the inference engine returned.
    """
    if tis_cap is None:
        return None
    weights, _ = compute_rollout_correction_weights(trainer_log_prob - rollout_log_prob, response_mask,
                                                    rollout_is="token", rollout_is_threshold=tis_cap)
    return weights


# ---------------------------------------------------------------- KL to a frozen reference
def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """Per-token KL estimate of the policy against the reference (Schulman's estimators, as veRL names them).

    ``kl``/``k1``: ``logprob - ref``; ``abs``: ``|logprob - ref|``; ``mse``/``k2``: ``0.5 * (logprob - ref)^2``;
    ``low_var_kl``/``k3``: ``exp(d) - d - 1`` with ``d = clamp(ref - logprob, -20, 20)``, clamped to [-10, 10].
    A trailing ``+`` (``k3+``) keeps the value but takes the k2 gradient (straight-through).
    """
    base = kl_penalty[:-1] if kl_penalty.endswith("+") else kl_penalty
    diff = logprob - ref_logprob
    if base in ("kl", "k1"):
        value = diff
    elif base == "abs":
        value = diff.abs()
    elif base in ("mse", "k2"):
        value = 0.5 * diff.square()
    elif base in ("low_var_kl", "k3"):
        d = torch.clamp(-diff, min=-_LOG_RATIO_BOUND, max=_LOG_RATIO_BOUND)
        value = torch.clamp(torch.exp(d) - d - 1, min=-10, max=10)
    else:
        raise ValueError(f"unknown kl_penalty {kl_penalty!r} (known: {', '.join(KL_PENALTIES)}, optionally with +)")
    if not kl_penalty.endswith("+") or base in ("mse", "k2"):
        return value
    k2 = 0.5 * diff.square()
    return k2 - k2.detach() + value.detach()


# ---------------------------------------------------------------- DAPO: overlong shaping, dynamic sampling
def overlong_reward_shaping(rewards: torch.Tensor, response_lengths: torch.Tensor, max_response_length: int,
                            overlong_buffer_len: int, overlong_penalty_factor: float = 1.0) -> torch.Tensor:
    """DAPO's soft overlong punishment: ``reward + min(-(length - (max - buffer)) / buffer * factor, 0)``.

    No penalty up to ``max_response_length - overlong_buffer_len`` tokens, then a linear one reaching
    ``-factor`` at ``max_response_length``. ``overlong_buffer_len`` 0 turns it off (rewards returned unchanged).
    ``response_lengths`` are the caller's lengths in tokens, parallel to ``rewards`` (any shape); forge passes each
    rollout's longest completion against the completion limit, since that is where a rollout is cut.
    """
    if overlong_buffer_len == 0:
        return rewards
    if overlong_buffer_len < 0 or max_response_length < overlong_buffer_len:
        raise ValueError(f"overlong buffer of {overlong_buffer_len} tokens does not fit a response limit of "
                         f"{max_response_length}")
    exceed = response_lengths.to(rewards.dtype) - (max_response_length - overlong_buffer_len)
    penalty = torch.clamp(-exceed / overlong_buffer_len * overlong_penalty_factor, max=0.0)
    return rewards + penalty


@dataclass(frozen=True)
class DynamicSamplingResult:
    """Outcome of ``dynamic_sampling_filter``: group ids to train on (in input order), those dropped because their
    rewards are all equal, those left over beyond ``target_groups``, and how many new groups to generate."""

    kept: list[str]
    dropped: list[str]
    surplus: list[str]
    refill: int


def dynamic_sampling_filter(rewards_by_group: Mapping[str, Sequence[float]], mode: str = "drop",
                            target_groups: int | None = None) -> DynamicSamplingResult:
    """DAPO's dynamic sampling: a group whose rewards are all equal has all-zero advantages, so it carries no signal.

    ``off``: keep every group. ``drop``: drop groups of two or more rollouts whose rewards are all equal (a group
    of one is kept, as veRL does). ``refill``: the same, and ``refill`` says how many groups are missing to reach
    ``target_groups`` (required in this mode); the caller generates that many new groups and filters them again,
    up to ``algo.dynamic_sampling_max_rounds`` rounds. When ``target_groups`` is set, kept groups beyond it move to
    ``surplus`` (veRL discards them too). Pure: nothing is generated here. "All equal" is exact equality; veRL
    tests ``np.std(rewards) == 0``, which float rounding can miss (``[0.1] * 3`` has std 1.4e-17 and stays there).
    """
    if mode not in DYNAMIC_SAMPLING_MODES:
        raise ValueError(f"unknown dynamic sampling mode {mode!r} (known: {', '.join(DYNAMIC_SAMPLING_MODES)})")
    if mode == "refill" and target_groups is None:
        raise ValueError("dynamic sampling mode 'refill' needs target_groups")
    kept: list[str] = []
    dropped: list[str] = []
    for group, rewards in rewards_by_group.items():
        values = [float(reward) for reward in rewards]
        uniform = len(values) > 1 and max(values) == min(values)
        (dropped if mode != "off" and uniform else kept).append(group)
    surplus: list[str] = []
    if target_groups is not None and len(kept) > target_groups:
        kept, surplus = kept[:target_groups], kept[target_groups:]
    refill = max(0, target_groups - len(kept)) if mode == "refill" and target_groups is not None else 0
    return DynamicSamplingResult(kept=kept, dropped=dropped, surplus=surplus, refill=refill)
