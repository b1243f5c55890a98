"""forge's RL algorithms (forge_cli/train/algos.py) pinned to values computed by hand in the comments."""

from __future__ import annotations

import math

import pytest
import torch

from forge_cli.config.compose import ConfigError, compose
from forge_cli.train import algos
from forge_cli.train.algos import (
    PolicyLossConfig,
    agg_loss,
    compute_grpo_outcome_advantage,
    compute_policy_loss,
    compute_policy_loss_vanilla,
    compute_rloo_outcome_advantage,
    compute_rollout_correction_weights,
    dynamic_sampling_filter,
    kl_penalty,
    overlong_reward_shaping,
    rollout_advantages,
    tis_weights,
    token_loss_weights,
)

LN2 = math.log(2.0)


def _close(actual: torch.Tensor | list[float] | float, expected: list[float] | list[list[float]] | float,
           tol: float = 1e-5) -> None:
    torch.testing.assert_close(torch.as_tensor(actual, dtype=torch.float64),
                               torch.as_tensor(expected, dtype=torch.float64), atol=tol, rtol=0)


def _outcome(rewards: list[float], length: int = 3) -> torch.Tensor:
    """Token-level rewards with the reward on each row's last token (how veRL lays out outcome rewards)."""
    token_rewards = torch.zeros(len(rewards), length)
    token_rewards[:, -1] = torch.tensor(rewards)
    return token_rewards


# ---------------------------------------------------------------- advantages
def test_grpo_one_group_with_std_normalisation() -> None:
    # mean 0.5; unbiased std = sqrt(4 * 0.25 / 3) = 0.57735; 0.5 / 0.57735 = 0.866025
    mask = torch.tensor([[1.0, 1.0, 0.0]] * 4)
    advantages, returns = compute_grpo_outcome_advantage(_outcome([1, 0, 0, 1]), mask, ["g"] * 4)
    _close(advantages[:, 0], [0.866025, -0.866025, -0.866025, 0.866025])
    assert torch.equal(advantages[:, 2], torch.zeros(4)) and torch.equal(advantages, returns)


def test_grpo_without_std_two_groups_and_a_singleton() -> None:
    rewards = _outcome([1, 0, 0, 1, 0.2, 0.6, 0.5])
    index = ["a", "a", "a", "a", "b", "b", "c"]
    advantages, _ = compute_grpo_outcome_advantage(rewards, torch.ones(7, 3), index, norm_adv_by_std_in_grpo=False)
    # a: mean 0.5; b: mean 0.4; c alone keeps its reward (veRL: mean 0, std 1)
    _close(advantages[:, 1], [0.5, -0.5, -0.5, 0.5, -0.2, 0.2, 0.5])
    normed, _ = compute_grpo_outcome_advantage(rewards, torch.ones(7, 3), index, epsilon=1e-6)
    # b: std = sqrt(2 * 0.04 / 1) = 0.282843 -> -/+0.2 / 0.282843 = -/+0.707107; c: 0.5 / (1 + 1e-6)
    _close(normed[4:, 0], [-0.707107, 0.707107, 0.5])


def test_grpo_all_equal_group_is_zero() -> None:
    advantages, _ = compute_grpo_outcome_advantage(_outcome([1, 1, 1]), torch.ones(3, 3), [7, 7, 7])
    assert torch.equal(advantages, torch.zeros(3, 3))


def test_rloo_leave_one_out() -> None:
    # row 0: 1 - mean(0, 0, 1) = 2/3; row 1: 0 - mean(1, 0, 1) = -2/3
    advantages, _ = compute_rloo_outcome_advantage(_outcome([1, 0, 0, 1]), torch.ones(4, 3), ["g"] * 4)
    _close(advantages[:, 0], [2 / 3, -2 / 3, -2 / 3, 2 / 3])
    # a group of one keeps its reward (veRL's rule)
    single, _ = compute_rloo_outcome_advantage(_outcome([0.25]), torch.ones(1, 3), ["x"])
    _close(single, [[0.25, 0.25, 0.25]])


def test_registry_and_rollout_advantages() -> None:
    assert algos.get_adv_estimator_fn("grpo") is compute_grpo_outcome_advantage
    assert algos.get_adv_estimator_fn("rloo") is compute_rloo_outcome_advantage
    with pytest.raises(ValueError, match=r"unknown advantage estimator .gae.*registered: grpo, rloo"):
        algos.get_adv_estimator_fn("gae")
    with pytest.raises(ValueError, match="already registered"):
        algos.register_adv_est("grpo")(compute_rloo_outcome_advantage)
    rewards = {"r1": 1.0, "r2": 0.0, "r3": 0.0, "r4": 1.0, "s1": 1.0, "s2": 1.0}
    groups = {"r1": "g1", "r2": "g1", "r3": "g1", "r4": "g1", "s1": "g2", "s2": "g2"}
    grpo = rollout_advantages(rewards, groups)
    assert list(grpo) == list(rewards)
    _close(list(grpo.values()), [0.866025, -0.866025, -0.866025, 0.866025, 0.0, 0.0])
    _close(list(rollout_advantages(rewards, groups, norm_by_std=False).values()), [0.5, -0.5, -0.5, 0.5, 0, 0])
    _close(list(rollout_advantages(rewards, groups, mode="rloo").values()), [2 / 3, -2 / 3, -2 / 3, 2 / 3, 0, 0])
    with pytest.raises(ValueError, match="without a group id: r9"):
        rollout_advantages({"r9": 1.0}, {})


# ---------------------------------------------------------------- aggregation
LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])


@pytest.mark.parametrize(("mode", "expected"), [
    ("token-mean", 2.5),                      # (1 + 2 + 3 + 4) / 4
    ("token-sum", 10.0),
    ("seq-mean-token-sum", 5.0),              # (6 + 4) / 2
    ("seq-mean-token-mean", 3.0),             # (6 / 3 + 4 / 1) / 2
    ("seq-mean-token-sum-norm", 5.0 / 3),     # 5 / horizon 3
])
def test_agg_loss_modes(mode: str, expected: float) -> None:
    _close(agg_loss(LOSS, MASK, mode), expected)
    # the same as per-token weights, one sequence per row
    _close((LOSS * token_loss_weights(MASK, mode)).sum(), expected)


def test_agg_loss_global_denominators_and_empty_rows() -> None:
    _close(agg_loss(LOSS, MASK, "token-mean", batch_num_tokens=8), 10 / 8)
    _close(agg_loss(LOSS, MASK, "seq-mean-token-sum", global_batch_size=4), 10 / 4)
    _close(agg_loss(LOSS, MASK, "seq-mean-token-sum-norm", loss_scale_factor=10), 0.5)
    _close(agg_loss(LOSS, MASK, "token-mean", dp_size=2), 5.0)
    # an all-masked row does not count as a sequence; an all-masked batch is 0, not NaN
    _close(agg_loss(LOSS, torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]), "seq-mean-token-mean"), 2.0)
    assert agg_loss(LOSS, torch.zeros(2, 3), "token-mean").item() == 0.0
    with pytest.raises(ValueError, match="unknown loss_agg_mode 'mean'"):
        agg_loss(LOSS, MASK, "mean")


def test_token_loss_weights_make_a_rollout_one_sequence() -> None:
    # rows 0 and 1 are two segments of rollout r1, row 2 is rollout r2
    loss = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [4.0, 4.0, 4.0]])
    mask = torch.ones(3, 3)
    rollouts = ["r1", "r1", "r2"]
    # per segment: (1 + 1 + 4) / 3 = 2; per rollout: (1 + 4) / 2 = 2.5
    _close(agg_loss(loss, mask, "seq-mean-token-mean"), 2.0)
    _close((loss * token_loss_weights(mask, "seq-mean-token-mean", rollouts)).sum(), 2.5)
    # token sums per rollout: r1 6, r2 12 -> 9 (per segment it would be (3 + 3 + 12) / 3 = 6)
    weights = token_loss_weights(mask, "seq-mean-token-sum", rollouts)
    _close((loss * weights).sum(), 9.0)
    # split into micro-batches, the summed losses are the batch loss
    _close((loss[:2] * weights[:2]).sum() + (loss[2:] * weights[2:]).sum(), 9.0)
    # token-mean ignores the rollouts: 18 / 9
    _close((loss * token_loss_weights(mask, "token-mean", rollouts)).sum(), 2.0)
    assert token_loss_weights(torch.tensor([[1, 0]]), "token-mean").dtype == torch.float32


# ---------------------------------------------------------------- policy loss
OLD = torch.zeros(2, 3)
# ratios [[1.5, 0.5, 1.0], [0.5, 5.0, 2.0]]
NEW = torch.log(torch.tensor([[1.5, 0.5, 1.0], [0.5, 5.0, 2.0]]))
ADV = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
PPO_MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
DAPO = PolicyLossConfig(clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0)


def test_ppo_clip_higher_and_dual_clip() -> None:
    # A=+1: ratio 1.5 -> max(-1.5, -1.28) = -1.28 (clipped); 0.5 -> max(-0.5, -0.8) = -0.5; 1.0 -> -1.0
    # A=-1: ratio 0.5 -> max(0.5, 0.8) = 0.8 (clipped); 5.0 -> max(5, 1.28) = 5, dual clip -> min(3, 5) = 3
    # token-mean over 5 tokens: (-1.28 - 0.5 - 1.0 + 0.8 + 3.0) / 5 = 0.204
    loss, metrics = compute_policy_loss_vanilla(OLD, NEW, ADV, PPO_MASK, "token-mean", DAPO)
    _close(loss, 0.204)
    _close(metrics["actor/pg_clipfrac"], 0.4)          # 2 of 5 tokens clipped
    _close(metrics["actor/pg_clipfrac_lower"], 0.2)    # 1 of 5 hit the dual clip
    # -(ln 1.5 + ln 0.5 + 0 + ln 0.5 + ln 5) / 5
    _close(metrics["actor/ppo_kl"], -(math.log(1.5) - 2 * LN2 + math.log(5)) / 5)
    # seq-mean-token-sum: ((-2.78) + 3.8) / 2
    _close(compute_policy_loss_vanilla(OLD, NEW, ADV, PPO_MASK, "seq-mean-token-sum", DAPO)[0], 0.51)
    # symmetric clip 0.2: the first token becomes -1.2 -> (1.02 + 0.08) / 5
    _close(compute_policy_loss_vanilla(OLD, NEW, ADV, PPO_MASK, config=PolicyLossConfig())[0], 0.22)
    legacy = compute_policy_loss(OLD, NEW, ADV, PPO_MASK, cliprange=0.2, cliprange_high=0.28, clip_ratio_c=3.0)
    _close(torch.stack(legacy), [0.204, 0.4, metrics["actor/ppo_kl"], 0.2])
    with pytest.raises(ValueError, match="clip_ratio_c must be > 1"):
        compute_policy_loss_vanilla(OLD, NEW, ADV, PPO_MASK, config=PolicyLossConfig(clip_ratio_c=1.0))
    assert algos.get_policy_loss_fn("vanilla") is compute_policy_loss_vanilla


def test_ppo_with_tis_weights_loss_weights_and_gradient() -> None:
    is_weights = torch.tensor([[2.0, 1.0, 0.5], [1.0, 1.0, 1.0]])
    # (-2.56 - 0.5 - 0.5 + 0.8 + 3.0) / 5 = 0.048
    loss, _ = compute_policy_loss_vanilla(OLD, NEW, ADV, PPO_MASK, "token-mean", DAPO, rollout_is_weights=is_weights)
    _close(loss, 0.048)
    weights = token_loss_weights(PPO_MASK, "seq-mean-token-sum", ["r1", "r1"])  # one rollout: sum / 1
    _close(compute_policy_loss_vanilla(OLD, NEW, ADV, PPO_MASK, config=DAPO, loss_weights=weights)[0], 1.02)
    new = NEW.clone().requires_grad_(True)
    compute_policy_loss_vanilla(OLD, new, ADV, PPO_MASK, "token-sum", DAPO)[0].backward()
    assert new.grad is not None
    # clipped and masked tokens get no gradient; ratio 0.5 with A=+1: d(-r)/d(log r) = -0.5
    _close(new.grad, [[0.0, -0.5, -1.0], [0.0, 0.0, 0.0]])


# ---------------------------------------------------------------- TIS
def test_truncated_importance_sampling() -> None:
    log_ratio = torch.log(torch.tensor([[0.5, 1.0, 3.0]]))
    weights, metrics = compute_rollout_correction_weights(log_ratio, torch.ones(1, 3), "token", 2.0)
    _close(weights, [[0.5, 1.0, 2.0]])   # 3.0 truncated to the cap
    _close(metrics["rollout_corr/rollout_is_truncated_frac"], 1 / 3)
    _close(metrics["rollout_corr/rollout_is_mean_raw"], 1.5)
    # sequence level: exp(ln 0.5 + ln 1 + ln 3) = 1.5 for every token
    _close(compute_rollout_correction_weights(log_ratio, torch.ones(1, 3), "sequence", 2.0)[0], [[1.5, 1.5, 1.5]])
    # masked tokens: weight 0 and left out of the sequence product (0.5 * 1)
    seq, _ = compute_rollout_correction_weights(log_ratio, torch.tensor([[1.0, 1.0, 0.0]]), "sequence", 2.0)
    _close(seq, [[0.5, 0.5, 0.0]])
    trainer = torch.log(torch.tensor([[0.3, 0.9]])).requires_grad_(True)
    rollout = torch.log(torch.tensor([[0.1, 0.9]]))
    capped = tis_weights(trainer, rollout, torch.ones(1, 2), tis_cap=2.0)
    assert capped is not None and not capped.requires_grad
    _close(capped, [[2.0, 1.0]])        # 0.3 / 0.1 = 3 -> 2
    assert tis_weights(trainer, rollout, torch.ones(1, 2), tis_cap=None) is None
    with pytest.raises(ValueError, match="unknown rollout_is 'geo'"):
        compute_rollout_correction_weights(log_ratio, torch.ones(1, 3), "geo", 2.0)


# ---------------------------------------------------------------- KL
@pytest.mark.parametrize(("mode", "up", "down"), [
    # logprob - ref = +ln 2 ("up") and -ln 2 ("down")
    ("kl", LN2, -LN2), ("k1", LN2, -LN2),
    ("abs", LN2, LN2),
    ("mse", 0.5 * LN2**2, 0.5 * LN2**2), ("k2", 0.5 * LN2**2, 0.5 * LN2**2),
    # exp(d) - d - 1 with d = ref - logprob: 0.5 + ln 2 - 1 and 2 - ln 2 - 1
    ("low_var_kl", 0.5 + LN2 - 1, 1 - LN2), ("k3", 0.5 + LN2 - 1, 1 - LN2),
])
def test_kl_penalty(mode: str, up: float, down: float) -> None:
    logprob = torch.log(torch.tensor([0.5, 0.25]))
    ref = torch.log(torch.tensor([0.25, 0.5]))
    _close(kl_penalty(logprob, ref, mode), [up, down])


def test_kl_straight_through_and_errors() -> None:
    logprob = torch.log(torch.tensor([0.5])).requires_grad_(True)
    value = kl_penalty(logprob, torch.log(torch.tensor([0.25])), "k3+")
    _close(value.detach(), [0.5 + LN2 - 1])   # k3's value ...
    value.sum().backward()
    assert logprob.grad is not None
    _close(logprob.grad, [LN2])               # ... with k2's gradient (logprob - ref)
    with pytest.raises(ValueError, match="unknown kl_penalty 'full'"):
        kl_penalty(logprob, logprob, "full")


# ---------------------------------------------------------------- DAPO extras
def test_overlong_reward_shaping() -> None:
    rewards = torch.ones(4)
    lengths = torch.tensor([50, 80, 90, 100])
    # limit 100, buffer 20: no penalty up to 80 tokens, then linear to -factor at 100
    _close(overlong_reward_shaping(rewards, lengths, 100, 20, 1.0), [1.0, 1.0, 0.5, 0.0])
    _close(overlong_reward_shaping(rewards, lengths, 100, 20, 0.5), [1.0, 1.0, 0.75, 0.5])
    assert overlong_reward_shaping(rewards, lengths, 100, 0, 1.0) is rewards
    with pytest.raises(ValueError, match="does not fit a response limit of 10"):
        overlong_reward_shaping(rewards, lengths, 10, 20, 1.0)


def test_dynamic_sampling_filter() -> None:
    groups = {"a": [1.0, 0.0, 1.0], "b": [1.0, 1.0, 1.0], "c": [0.0, 0.0], "d": [0.5], "e": [0.1, 0.1, 0.1]}
    dropped = dynamic_sampling_filter(groups, "drop")
    assert (dropped.kept, dropped.dropped, dropped.refill) == (["a", "d"], ["b", "c", "e"], 0)
    refill = dynamic_sampling_filter(groups, "refill", target_groups=4)
    assert (refill.kept, refill.refill) == (["a", "d"], 2)
    full = dynamic_sampling_filter(groups, "refill", target_groups=1)
    assert (full.kept, full.surplus, full.refill) == (["a"], ["d"], 0)
    assert dynamic_sampling_filter(groups, "off").kept == list(groups)
    with pytest.raises(ValueError, match="needs target_groups"):
        dynamic_sampling_filter(groups, "refill")
    with pytest.raises(ValueError, match="unknown dynamic sampling mode 'on'"):
        dynamic_sampling_filter(groups, "on")


# ---------------------------------------------------------------- the algo config
def test_algo_config_refuses_group_size_one_and_reads_yaml_off() -> None:
    with pytest.raises(ConfigError) as info:
        compose(["algo=dapo", "algo.group_size=1"])
    assert any(problem.startswith("algo.group_size: 1 is not allowed: group_size 1: every advantage would be 0")
               for problem in info.value.problems)
    dapo = compose(["algo=dapo"]).experiment.algo
    assert (dapo.dynamic_sampling, dapo.clip_ratio_high, dapo.overlong_buffer_tokens, dapo.tis_cap) == (
        "refill", 0.28, 32, 2.0)
    assert compose(["algo=dapo", "algo.dynamic_sampling=off"]).experiment.algo.dynamic_sampling == "off"
    assert compose(["algo=rloo", "algo.tis_cap=null"]).experiment.algo.tis_cap is None
