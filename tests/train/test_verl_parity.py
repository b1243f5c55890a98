"""forge's algorithms (forge_cli/train/algos.py) give veRL 0.9.1's numbers on the same tensors.

veRL's own functions run in a subprocess of the veRL environment's Python (``$FORGE_HOME/envs/verl``, built by
``scripts/setup.sh verl``), once for the module: ``VERL_SCRIPT`` reads the inputs as JSON and writes veRL's
outputs as JSON. Compared: GRPO / RLOO advantages (``core_algos``), one advantage per agent-loop session broadcast
to its outputs (``v1.utils.compute_advantage_for_multi_trajectories``), ``agg_loss`` in every mode,
``compute_policy_loss_vanilla`` (clip-higher, dual clip, TIS weights) and its metrics, ``kl_penalty`` values and
the k3+ gradient, ``rollout_corr_helper.compute_rollout_correction_weights``, DAPO's overlong penalty
(``DAPORewardManager``) and DAPO's group filter (``v1.replay_buffer.ReplayBuffer._dapo_filtered_keys``).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

from forge_cli.paths import env_python
from forge_cli.train import algos
from tests.requires import requires

VERL_SCRIPT = r'''
import json, sys, types
from collections import defaultdict
import numpy as np, torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_weights
from verl.trainer.ppo.v1 import replay_buffer
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories
from verl.workers.reward_manager.dapo import DAPORewardManager

inp = json.load(open(sys.argv[1]))
T = lambda x: torch.tensor(x, dtype=torch.float32)
L = lambda t: t.tolist()
out = {}

adv = inp["adv"]
index = np.array(adv["index"], dtype=object)
for norm in (True, False):
    a, _ = core_algos.compute_grpo_outcome_advantage(T(adv["rewards"]), T(adv["mask"]), index, epsilon=1e-6,
                                                     norm_adv_by_std_in_grpo=norm)
    out[f"grpo_{norm}"] = L(a)
out["rloo"] = L(core_algos.get_adv_estimator_fn("rloo")(token_level_rewards=T(adv["rewards"]),
                                                         response_mask=T(adv["mask"]), index=index)[0])

mt = inp["multi"]
data = DataProto.from_dict(tensors={"token_level_rewards": T(mt["rewards"]), "response_mask": T(mt["mask"])},
                           non_tensors={"uid": np.array(mt["uid"], dtype=object)})
data = compute_advantage_for_multi_trajectories(data, mt["keys"], core_algos.AdvantageEstimator.GRPO,
                                                norm_adv_by_std_in_grpo=True)
out["multi"] = L(data.batch["advantages"])

pl = inp["policy"]
old, new, advantages, mask, is_w = (T(pl[k]) for k in ("old", "new", "advantages", "mask", "is_weights"))
out["agg"] = {mode: core_algos.agg_loss(T(pl["loss_mat"]), mask, mode).item() for mode in pl["modes"]}
out["policy"] = []
for case in pl["cases"]:
    config = OmegaConf.create({"clip_ratio": case["low"], "clip_ratio_low": case["low"],
                               "clip_ratio_high": case["high"], "clip_ratio_c": case["c"], "global_batch_info": {}})
    loss, metrics = core_algos.get_policy_loss_fn("vanilla")(old, new, advantages, mask, case["mode"], config,
                                                             rollout_is_weights=is_w if case["tis"] else None)
    out["policy"].append({"loss": loss.item(), **metrics})

kl = inp["kl"]
out["kl"] = {m: L(core_algos.kl_penalty(T(kl["logprob"]), T(kl["ref"]), m)) for m in kl["modes"]}
logprob = T(kl["logprob"]).requires_grad_(True)
core_algos.kl_penalty(logprob, T(kl["ref"]), "k3+").sum().backward()
out["kl_k3plus_grad"] = L(logprob.grad)

out["tis"] = {f"{level}_{cap}": L(compute_rollout_correction_weights(T(inp["tis"]["log_ratio"]), mask, level, cap)[0])
              for level in ("token", "sequence") for cap in inp["tis"]["caps"]}

ov = inp["overlong"]
n, limit = len(ov["lengths"]), ov["max_len"]
attention = torch.zeros(n, 2 + limit, dtype=torch.long)
attention[:, :2] = 1
for i, length in enumerate(ov["lengths"]):
    attention[i, 2:2 + length] = 1
batch = DataProto.from_dict(
    tensors={"prompts": torch.ones(n, 2, dtype=torch.long), "responses": torch.ones(n, limit, dtype=torch.long),
             "attention_mask": attention},
    non_tensors={"reward_model": np.array([{"ground_truth": r} for r in ov["rewards"]], dtype=object),
                 "data_source": np.array(["forge"] * n, dtype=object)})
tokenizer = types.SimpleNamespace(eos_token="</s>", decode=lambda ids, skip_special_tokens=True: "x")
manager = DAPORewardManager(tokenizer, 0, compute_score=lambda data_source, solution_str, ground_truth, extra_info:
                            float(ground_truth), max_resp_len=limit,
                            overlong_buffer_cfg=OmegaConf.create({"enable": True, "len": ov["buffer"],
                                                                  "penalty_factor": ov["factor"], "log": False}))
out["overlong"] = L(manager(batch).sum(dim=-1))

groups = inp["dynamic"]
scores = {f"{g}_{i}": r for g, rewards in groups.items() for i, r in enumerate(rewards)}
replay_buffer.tq = types.SimpleNamespace(kv_batch_get=lambda keys, partition_id, select_fields: {
    "rm_scores": [torch.tensor([scores[k]]) for k in keys]})
buffer = object.__new__(replay_buffer.ReplayBuffer)
buffer.filter_groups_metric, buffer.finished_keys = "reward", {"train": set(groups)}
buffer._dapo_classification_cache, buffer.partitions = defaultdict(dict), {"train": {k: {} for k in scores}}
out["dynamic_dropped"] = sorted(buffer._dapo_filtered_keys("train")[0])

json.dump(out, open(sys.argv[2], "w"))
'''

MODES = ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
DYNAMIC = {"g0": [1.0, 0.0, 1.0, 1.0], "g1": [1.0, 1.0, 1.0, 1.0], "g2": [0.0, 0.0], "g3": [0.5], "g4": [0.25, 0.75]}
OVERLONG: dict[str, Any] = {"lengths": [50, 80, 85, 90, 100], "rewards": [1.0, 0.0, 1.0, 1.0, 0.5], "max_len": 100,
                            "buffer": 20, "factor": 0.5}


def _inputs() -> dict[str, Any]:
    """Fixed tensors (seeded), as nested lists for the veRL side; forge's side reads the same lists."""
    gen = torch.Generator().manual_seed(7)
    rand = lambda *shape: torch.rand(*shape, generator=gen)  # noqa: E731
    mask = (rand(6, 7) > 0.3).float()
    mask[:, 0] = 1.0
    mask[5] = 0.0                     # an all-masked row
    adv_rewards = torch.zeros(9, 4)
    adv_rewards[:, -1] = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.3, 0.9, 0.4, 0.7, 0.2])
    # segments of rollouts: (group, rollout, segment); reward on each rollout's final segment (what veRL reads)
    segments = [("a", 0, 0), ("a", 0, 1), ("a", 1, 0), ("a", 2, 0), ("a", 2, 1), ("a", 2, 2), ("a", 3, 0),
                ("b", 0, 0), ("b", 1, 0), ("b", 1, 1), ("b", 2, 0)]
    reward_of = {("a", 0): 1.0, ("a", 1): 0.0, ("a", 2): 0.0, ("a", 3): 1.0, ("b", 0): 0.2, ("b", 1): 0.9,
                 ("b", 2): 0.4}
    last = {(g, r): s for g, r, s in segments}
    multi_rewards = torch.zeros(len(segments), 5)
    for row, (g, r, s) in enumerate(segments):
        if last[(g, r)] == s:
            multi_rewards[row, 2] = reward_of[(g, r)]
    multi_mask = (rand(len(segments), 5) > 0.4).float()
    multi_mask[:, 0] = 1.0
    return {
        "adv": {"rewards": adv_rewards.tolist(), "mask": (rand(9, 4) > 0.2).float().tolist(),
                "index": ["x", "x", "x", "x", "y", "y", "y", "z", "w"]},
        "multi": {"rewards": multi_rewards.tolist(), "mask": multi_mask.tolist(), "uid": [g for g, _, _ in segments],
                  "keys": [f"{g}_{r}_{s}" for g, r, s in segments], "reward_of": {f"{g}_{r}": v for (g, r), v in
                                                                                    reward_of.items()}},
        "policy": {"old": (-3 * rand(6, 7)).tolist(), "new": (-3 * rand(6, 7)).tolist(),
                   "advantages": (4 * rand(6, 7) - 2).tolist(), "mask": mask.tolist(),
                   "is_weights": (2 * rand(6, 7)).tolist(), "loss_mat": (rand(6, 7) - 0.5).tolist(), "modes": MODES,
                   "cases": [{"low": low, "high": high, "c": c, "mode": mode, "tis": tis}
                             for low, high, c in ((0.2, 0.2, 3.0), (0.2, 0.28, 10.0), (0.1, 0.5, 1.5))
                             for mode in MODES for tis in (False, True)]},
        "kl": {"logprob": (-4 * rand(3, 5)).tolist(), "ref": (-4 * rand(3, 5)).tolist(),
               "modes": ["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "k3+"]},
        "tis": {"log_ratio": (rand(6, 7) - 0.5).tolist(), "caps": [2.0, 1.2]},
        "overlong": OVERLONG,
        "dynamic": DYNAMIC,
    }


@pytest.fixture(scope="module")
def parity(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    """(inputs, veRL's outputs) from one run of VERL_SCRIPT in the veRL environment."""
    requires("verl")
    python = env_python("verl")
    work: Path = tmp_path_factory.mktemp("verl")
    inputs = _inputs()
    (work / "in.json").write_text(json.dumps(inputs))
    (work / "ref.py").write_text(VERL_SCRIPT)
    done = subprocess.run([str(python), str(work / "ref.py"), str(work / "in.json"), str(work / "out.json")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"veRL reference script failed:\n{done.stderr[-3000:]}"
    return inputs, json.loads((work / "out.json").read_text())


def _t(values: Any) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def _same(forge: torch.Tensor | float, verl: Any) -> None:
    torch.testing.assert_close(torch.as_tensor(forge, dtype=torch.float32), _t(verl), rtol=1e-5, atol=1e-6)


def test_grpo_and_rloo_advantages(parity: tuple[dict[str, Any], dict[str, Any]]) -> None:
    inputs, verl = parity
    adv = inputs["adv"]
    for norm in (True, False):
        forge, _ = algos.compute_grpo_outcome_advantage(_t(adv["rewards"]), _t(adv["mask"]), adv["index"],
                                                        epsilon=1e-6, norm_adv_by_std_in_grpo=norm)
        _same(forge, verl[f"grpo_{norm}"])
    _same(algos.compute_rloo_outcome_advantage(_t(adv["rewards"]), _t(adv["mask"]), adv["index"])[0], verl["rloo"])


def test_one_advantage_per_rollout_broadcast_to_its_segments(parity: tuple[dict[str, Any], dict[str, Any]]) -> None:
    inputs, verl = parity
    multi = inputs["multi"]
    groups = {rollout: rollout.split("_")[0] for rollout in multi["reward_of"]}
    per_rollout = algos.rollout_advantages(multi["reward_of"], groups, "grpo", norm_by_std=True, epsilon=1e-6)
    rows = [per_rollout[key.rsplit("_", 1)[0]] for key in multi["keys"]]
    _same(_t(rows).unsqueeze(-1) * _t(multi["mask"]), verl["multi"])


def test_agg_loss_and_policy_loss(parity: tuple[dict[str, Any], dict[str, Any]]) -> None:
    inputs, verl = parity
    policy = inputs["policy"]
    mask = _t(policy["mask"])
    for mode in MODES:
        _same(algos.agg_loss(_t(policy["loss_mat"]), mask, mode), verl["agg"][mode])
        # forge's per-token weights, one sequence per row, are the same aggregation
        _same((_t(policy["loss_mat"]) * algos.token_loss_weights(mask, mode)).sum(), verl["agg"][mode])
    assert len(policy["cases"]) == len(verl["policy"]) == 30
    for case, expected in zip(policy["cases"], verl["policy"], strict=True):
        config = algos.PolicyLossConfig(clip_ratio=case["low"], clip_ratio_low=case["low"],
                                        clip_ratio_high=case["high"], clip_ratio_c=case["c"])
        loss, metrics = algos.compute_policy_loss_vanilla(
            _t(policy["old"]), _t(policy["new"]), _t(policy["advantages"]), mask, case["mode"], config,
            rollout_is_weights=_t(policy["is_weights"]) if case["tis"] else None)
        _same(loss, expected["loss"])
        for key in ("actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"):
            _same(metrics[key], expected[key])


def test_kl_penalty_and_tis(parity: tuple[dict[str, Any], dict[str, Any]]) -> None:
    inputs, verl = parity
    kl = inputs["kl"]
    for mode in kl["modes"]:
        _same(algos.kl_penalty(_t(kl["logprob"]), _t(kl["ref"]), mode), verl["kl"][mode])
    logprob = _t(kl["logprob"]).requires_grad_(True)
    algos.kl_penalty(logprob, _t(kl["ref"]), "k3+").sum().backward()
    assert logprob.grad is not None
    _same(logprob.grad, verl["kl_k3plus_grad"])
    mask = _t(inputs["policy"]["mask"])
    for level in ("token", "sequence"):
        for cap in inputs["tis"]["caps"]:
            weights, _ = algos.compute_rollout_correction_weights(_t(inputs["tis"]["log_ratio"]), mask, level, cap)
            _same(weights, verl["tis"][f"{level}_{cap}"])


def test_dapo_overlong_shaping_and_group_filter(parity: tuple[dict[str, Any], dict[str, Any]]) -> None:
    _, verl = parity
    shaped = algos.overlong_reward_shaping(_t(OVERLONG["rewards"]), torch.tensor(OVERLONG["lengths"]),
                                           OVERLONG["max_len"], OVERLONG["buffer"], OVERLONG["factor"])
    _same(shaped, verl["overlong"])
    _same(shaped, [1.0, 0.0, 0.875, 0.75, 0.0])   # by hand: penalties 0, 0, -0.125, -0.25, -0.5
    assert sorted(algos.dynamic_sampling_filter(DYNAMIC, "drop").dropped) == verl["dynamic_dropped"] == ["g1", "g2"]
