"""The conformance kit of an advantage estimator (``forge_cli/train/algos.py``: ``register_adv_est``).

    problems = check_advantage("mine")      # a registered name, or pkg.module:function
    assert not problems, problems

forge computes advantages per rollout, grouped by task: the estimator gets one row per rollout (its reward on the
row's last token), ``index[i]`` naming row i's group, and must give each row one value. The kit checks what forge's
trainer relies on: veRL's call signature (``epsilon``, ``norm_adv_by_std_in_grpo``, ``config`` keywords), two
tensors of the rewards' shape, zeros outside the response mask, one value per row, rows of one group moved together
give the same values moved (order does not matter), one group's rewards never change another group's values, a
group of one row gives a finite value, and the inputs are left as they were.
"""

from __future__ import annotations

from typing import Any

import torch

from forge_cli.train.algos import get_adv_estimator_fn


def _call(fn: Any, rewards: torch.Tensor, mask: torch.Tensor, index: list[str]) -> torch.Tensor:
    advantages, returns = fn(rewards, mask, index, epsilon=1e-6, norm_adv_by_std_in_grpo=True, config=None)
    if not (isinstance(advantages, torch.Tensor) and isinstance(returns, torch.Tensor)):
        raise TypeError(f"returned ({type(advantages).__name__}, {type(returns).__name__}), not two tensors")
    if advantages.shape != rewards.shape or returns.shape != rewards.shape:
        raise TypeError(f"returned shapes {tuple(advantages.shape)} and {tuple(returns.shape)}, not the rewards' "
                        f"{tuple(rewards.shape)}")
    return advantages


def _rows(mask: torch.Tensor, rewards: list[float]) -> torch.Tensor:
    """Token-level rewards: each row's reward on its last response token."""
    out = torch.zeros_like(mask)
    for row, reward in enumerate(rewards):
        out[row, int(mask[row].nonzero().max())] = reward
    return out


def check_advantage(name: str) -> list[str]:
    """Problems of the estimator registered (or importable) as ``name``; empty when it conforms."""
    try:
        fn = get_adv_estimator_fn(name)
    except ValueError as exc:
        return [str(exc)]
    problems: list[str] = []
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 1, 0], [1, 1, 0, 0]],
                        dtype=torch.float32)
    rewards = _rows(mask, [1.0, 0.0, 0.5, 1.0, 0.0, 0.25])
    index = ["a", "a", "a", "b", "b", "c"]
    before = (rewards.clone(), mask.clone())
    try:
        adv = _call(fn, rewards, mask, index)
    except Exception as exc:
        return [f"a call with veRL's arguments failed: {type(exc).__name__}: {exc}"]
    if not (torch.equal(rewards, before[0]) and torch.equal(mask, before[1])):
        problems.append("the estimator changed its inputs in place")
    if bool((adv * (1 - mask)).abs().gt(0).any()):
        problems.append("non-zero advantages outside the response mask")
    per_row = [adv[row][mask[row] > 0] for row in range(len(index))]
    if any(not torch.allclose(values, values[0].expand_as(values)) for values in per_row):
        problems.append("a row's advantage differs between its tokens (forge trains one advantage per rollout)")
    if not bool(torch.isfinite(adv).all()):
        problems.append("non-finite advantages (a group of one row must give a finite value)")
    first = torch.stack([values[0] for values in per_row])
    # order: rows moved with their group ids give the same values moved
    order = [4, 2, 0, 5, 1, 3]
    try:
        moved = _call(fn, rewards[order], mask[order], [index[i] for i in order])
        moved_first = torch.stack([moved[row][mask[order][row] > 0][0] for row in range(len(order))])
        if not torch.allclose(moved_first, first[order], atol=1e-5):
            problems.append("the advantages depend on the rows' order, not only on their groups")
    except Exception as exc:
        problems.append(f"reordered rows failed: {type(exc).__name__}: {exc}")
    # independence: other rewards for group b leave group a's advantages as they were
    try:
        other = _call(fn, _rows(mask, [1.0, 0.0, 0.5, 7.0, -3.0, 0.25]), mask, index)
        if not torch.allclose(other[:3], adv[:3], atol=1e-5):
            problems.append("one group's rewards changed another group's advantages")
    except Exception as exc:
        problems.append(f"other rewards failed: {type(exc).__name__}: {exc}")
    return problems
