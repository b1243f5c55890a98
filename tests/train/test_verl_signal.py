"""One training signal: what forge's trainer=verl plan makes veRL 0.9.1's V1 path compute, against forge's own loop.

``SCRIPT`` runs in veRL's environment with the dry run's composed config and veRL's own code:

- advantages: ``compute_advantage_for_multi_trajectories`` (V1) on rows of lone and multi-segment rollouts, beside
  forge's ``algos.rollout_advantages`` on the same rollouts;
- a group whose rollouts were all dropped: the sampler veRL's trainer builds from the plan (forge's
  ``ForgeReplayBuffer`` over veRL's sync ``ReplayBuffer``, with DAPO's filter and ``sync_refill_failed_groups``), over
  a TransferQueue stand-in (the same fake as veRL's CPU tests: TQ is a
  Ray service), when the agent loop raises ``RolloutDropped`` (forge's way: the group is evicted and refilled) and
  when it returns ``[]`` (the old way: the step crashes); forge's counters, written by two workers, in the step's
  metrics;
- optimizer steps: ``PPOTrainer._get_required_batch_multiple`` on the plan's config and veRL's padding rule
  (``upsample_batch_to_divisible_size``) for a step whose rollouts split.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from forge_cli.paths import env_python
from forge_cli.train.algos import rollout_advantages
from tests.helpers import forge

REPO = Path(__file__).resolve().parents[2]

SCRIPT = r'''
import json, logging, math, os, sys, types, warnings
warnings.filterwarnings("ignore"); logging.disable(logging.WARNING)
import numpy as np, torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
import verl
from verl.protocol import DataProto
from verl.trainer.ppo.v1 import replay_buffer as rbm
from verl.trainer.ppo.v1.trainer_base import PPOTrainer
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories
plan = json.load(open(sys.argv[1]))
argv = plan["command"]
with initialize_config_dir(config_dir=os.path.join(os.path.dirname(verl.__file__), "trainer", "config"),
                           version_base=None):
    cfg = compose(config_name=argv[3].split("=", 1)[1], overrides=argv[4:])
out = {}
# 1. advantages over rows (uid, session, segment, reward): lone 1-segment, lone 2-segment, a split rollout in a group
rows = [("A", 0, 0, 1.0), ("B", 0, 0, 1.0), ("B", 0, 1, 1.0),
        ("C", 0, 0, 1.0), ("C", 0, 1, 1.0), ("C", 1, 0, 0.0), ("C", 2, 0, 0.0)]
rewards = torch.zeros(len(rows), 3)
rewards[:, -1] = torch.tensor([r[3] for r in rows])
data = DataProto.from_dict(tensors={"token_level_rewards": rewards,
                                    "response_mask": torch.ones(len(rows), 3, dtype=torch.int64)},
                           non_tensors={"uid": np.array([r[0] for r in rows], dtype=object)})
keys = [f"{u}_{s}_{i}" for u, s, i, _ in rows]
adv = compute_advantage_for_multi_trajectories(
    data, keys, cfg.algorithm.adv_estimator, num_repeat=cfg.actor_rollout_ref.rollout.n,
    norm_adv_by_std_in_grpo=cfg.algorithm.norm_adv_by_std_in_grpo, config={})
out["advantages"] = dict(zip(keys, adv.batch["advantages"][:, 0].tolist()))


# 2. a step in which one group's rollouts were all dropped
class TQ:
    def __init__(self):
        self.tags, self.rm = {"train": {}}, {}
    def kv_list(self):
        return {p: dict(v) for p, v in self.tags.items()}
    def kv_clear(self, partition_id, keys):
        for k in keys:
            self.tags[partition_id].pop(k, None)
    def kv_batch_get(self, keys, partition_id, select_fields=None):
        return {"rm_scores": [self.rm[k] for k in keys]}
    def group(self, uid, status, sessions):  # sessions: (rows, reward); 0 rows: the loop stored nothing
        self.tags["train"][uid] = {"is_prompt": True, "status": status, "global_steps": 1}
        for s, (n, r) in enumerate(sessions):
            for i in range(n):
                self.tags["train"][f"{uid}_{s}_{i}"] = {"status": "success", "seq_len": 10}
                self.rm[f"{uid}_{s}_{i}"] = torch.tensor([0.0, r])


def step(dropped_status):
    tq = TQ()
    rbm.tq = tq
    tq.group("lost", dropped_status, [(0, 0.0), (0, 0.0)])  # what _run_prompt tags after RolloutDropped / []
    tq.group("kept", "finished", [(1, 1.0), (2, 0.0)])
    refills = []
    def refill(k):
        refills.append(k)
        for i in range(k):
            tq.group(f"new{i}", "finished", [(1, 1.0), (1, 0.0)])
    # the sampler as veRL's trainer builds it from the plan's config (forge's ForgeReplayBuffer, its kwargs)
    trainer = types.SimpleNamespace(config=cfg, trainer_mode="sync", _add_prompts_to_generate=refill)
    buffer = PPOTrainer._build_replay_buffer(trainer)
    buffer.poll_interval = 0.0
    out["sampler"] = type(buffer).__name__
    try:
        batch, metrics = buffer.sample(global_steps=1, partition_id="train", batch_size=2)
        return {"groups": sorted({k.split("_")[0] for k in batch.keys}), "refills": refills, "metrics": metrics}
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}


# forge's counters, as two agent-loop workers leave them, reach the step's metrics through forge's sampler
sys.path.insert(0, sys.argv[2])
from forge_cli.train.verl.counters import WorkerCounters
counters_dir = cfg.trainer.v1.sampler.sampler_kwargs.forge_counters_dir
first, second = WorkerCounters(__import__("pathlib").Path(counters_dir)), None
first.record("ok")
first.record("infra_error", dropped="infra_error")
second = WorkerCounters(__import__("pathlib").Path(counters_dir))
second.path = second.path.with_name("other-host-1.json")
second.record("ok")
out["raised"] = step("failure")
out["empty"] = step("finished")
# 3. optimizer steps per pass: rows padded to veRL's multiple, one step per ppo_mini_batch_size x n rows
trainer = types.SimpleNamespace(use_critic=False, config=cfg, global_steps=1)
multiple = PPOTrainer._get_required_batch_multiple(trainer, 1)
tasks, n = cfg.data.train_batch_size, cfg.actor_rollout_ref.rollout.n
rows_per_step = {"one each": tasks * n, "3 split in 2": tasks * n + 3, "all in 4": tasks * n * 4,
                 "all in 5": tasks * n * 5}
mini = cfg.actor_rollout_ref.actor.ppo_mini_batch_size * n
out["optimizer_steps"] = {k: math.ceil(v / multiple) * multiple // mini for k, v in rows_per_step.items()}
print(json.dumps(out))
'''


def _in_verl(tmp_path: Path, *overrides: str) -> dict[str, Any]:
    result = forge("train", "--dry-run", "--json", "trainer=verl", "trainer.n_gpus_per_node=1",
                   "trainer.tasks_per_step=4", f"run.output_dir={tmp_path / 'runs'}", *overrides, timeout=300)
    assert result.returncode == 0, result.stderr
    (tmp_path / "plan.json").write_text(result.stdout)
    (tmp_path / "script.py").write_text(SCRIPT)
    argv = [str(env_python("verl")), str(tmp_path / "script.py"), str(tmp_path / "plan.json"), str(REPO)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return got


@pytest.mark.requires("verl")
@pytest.mark.parametrize("algo", ["grpo", "dapo"])
def test_verl_computes_forges_signal(tmp_path: Path, algo: str) -> None:
    got = _in_verl(tmp_path, f"algo={algo}")
    # advantages: per rollout in both (veRL reduces a rollout's rows to one before GRPO), the same numbers
    forge_adv = rollout_advantages({"A_0": 1.0, "B_0": 1.0, "C_0": 1.0, "C_1": 0.0, "C_2": 0.0},
                                   {"A_0": "A", "B_0": "B", "C_0": "C", "C_1": "C", "C_2": "C"}, "grpo", True)
    for key, value in got["advantages"].items():
        assert value == pytest.approx(forge_adv[key.rsplit("_", 1)[0]], abs=1e-4), (key, value, forge_adv)
    assert got["advantages"]["A_0_0"] == pytest.approx(1.0, abs=1e-4)  # a lone rollout keeps its reward
    assert got["advantages"]["C_0_0"] == got["advantages"]["C_0_1"] == pytest.approx(2 / 3 / 0.5773503, abs=1e-3)
    # a group whose rollouts were all dropped: forge's RolloutDropped -> evicted and refilled; [] crashed the step
    assert got["raised"]["groups"] == ["kept", "new0"] and got["raised"]["refills"] == [1], got["raised"]
    # forge's counters in the step's metrics (forge's sampler, built by veRL from the plan's config)
    assert got["sampler"] == "ForgeReplayBuffer"
    metrics = got["raised"]["metrics"]
    assert metrics["forge/rollouts_total/ok"] == 2 and metrics["forge/rollouts_total/infra_error"] == 1, metrics
    assert metrics["forge/dropped_total/infra_error"] == 1, metrics
    if algo == "dapo":  # DAPO's filter finds a finished group without its metric
        assert "RuntimeError" in got["empty"].get("error", ""), got["empty"]
    else:  # the step silently trains on fewer groups (and on none when every group is empty: veRL raises)
        assert got["empty"]["groups"] == ["kept"] and got["empty"]["refills"] == [], got["empty"]
    # one optimizer step per pass while rollouts average <= 4 segments (veRL's padding rows carry no loss)
    assert got["optimizer_steps"] == {"one each": 1, "3 split in 2": 1, "all in 4": 1, "all in 5": 2}
