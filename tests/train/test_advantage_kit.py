"""Advantage estimators are plugins: one defined in a package of its own registers by name with veRL's decorator,
``algo.advantage`` takes it with no central list edited, forge's trainer uses it (rollout advantages), and
``forge_cli.testing.advantage`` (the kit it runs) passes it and forge's own, and fails each copy with one planted
defect."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from forge_cli.testing.advantage import check_advantage
from forge_cli.train.algos import ADVANTAGES, rollout_advantages
from tests.helpers import forge, install_module, temporary_package

PLUGIN = '''
import torch

from forge_cli.train.algos import register_adv_est


@register_adv_est("centered")
def centered(token_level_rewards, response_mask, index, epsilon=1e-6, config=None, **kwargs):
    """Reward minus its group's mean (Dr. GRPO without the std)."""
    scores = token_level_rewards.sum(dim=-1)
    means = {g: scores[[i for i, h in enumerate(index) if h == g]].mean() for g in set(index)}
    scalars = torch.stack([scores[i] - means[g] for i, g in enumerate(index)])
    advantages = scalars.unsqueeze(-1) * response_mask
    return advantages, advantages
'''

DEFECTS = {
    "non-zero advantages outside the response mask": (
        "    advantages = scalars.unsqueeze(-1) * response_mask",
        "    advantages = scalars.unsqueeze(-1).expand_as(response_mask).clone()"),
    "one group's rewards changed another group's advantages": (
        "    means = {g: scores[[i for i, h in enumerate(index) if h == g]].mean() for g in set(index)}",
        "    means = {g: scores.mean() for g in set(index)}"),
    "a call with veRL's arguments failed": (
        "epsilon=1e-6, config=None, **kwargs):", "epsilon=1e-6, config=None):"),
    "the estimator changed its inputs in place": (
        "    scores = token_level_rewards.sum(dim=-1)",
        "    scores = token_level_rewards.sum(dim=-1)\n    token_level_rewards.zero_()"),
}


@pytest.fixture
def plugin(tmp_path: Path) -> Iterator[Path]:
    with temporary_package(tmp_path, "my_estimators") as package:
        yield package
    ADVANTAGES.remove("centered")


@pytest.mark.parametrize("name", ["grpo", "rloo"])
def test_forges_estimators_pass_the_kit(name: str) -> None:
    assert check_advantage(name) == []


def test_a_packages_estimator_passes_the_kit_and_trains(plugin: Path) -> None:
    install_module(plugin, "centered", PLUGIN)
    assert check_advantage("centered") == []
    advantages = rollout_advantages({"r1": 1.0, "r2": 0.0, "r3": 0.5}, {"r1": "g", "r2": "g", "r3": "g"}, "centered")
    assert advantages == pytest.approx({"r1": 0.5, "r2": -0.5, "r3": 0.0})
    # by dotted path too, without registering: the function itself
    assert check_advantage("my_estimators.centered:centered") == []


@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_the_kit_fails_an_estimator_with_one_planted_defect(defect: str, plugin: Path) -> None:
    good, bad = DEFECTS[defect]
    assert good in PLUGIN
    install_module(plugin, "centered", PLUGIN.replace(good, bad))
    problems = check_advantage("centered")
    assert any(defect in p for p in problems), problems


def test_an_unregistered_estimator_is_one_message_exit_2(tmp_path: Path) -> None:
    done = forge("train", "--dry-run", "algo.advantage=nope", f"run.output_dir={tmp_path}")
    assert done.returncode == 2 and "unknown advantage estimator 'nope'" in done.stderr, done.stderr
    assert "registered: grpo, rloo" in done.stderr and "Traceback" not in done.stderr
