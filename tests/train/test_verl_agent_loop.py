"""forge's rollouts as veRL 0.9.1 agent-loop outputs (forge_cli/train/verl/convert.py), checked by veRL's own code.

Two real rollouts recorded by `forge train` (react harness, Qwen on vLLM; ``tests/fixtures/recorded_rollouts``):
``merged`` (three calls merged into one segment) and ``split`` (three calls: one segment, then a two-call merged
segment). forge's sample builder and ``convert`` run here; ``VERL_SCRIPT`` runs in the veRL environment's Python
(``scripts/setup.sh verl``) with this checkout on its path: it builds veRL's real ``AgentLoopOutput``s with
``to_agent_loop_outputs``, calls ``as_dict()``, runs the V1 worker's ``AgentLoopWorkerTQ._agent_loop_postprocess``
and ``_run_prompt`` (a fake TransferQueue and tokenizer, as veRL's CPU tests fake them) and
``compute_advantage_for_multi_trajectories`` over one group of two rollouts (rewards 1 and 0).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from forge_cli.paths import env_python
from forge_cli.rollout.reader import RunRollout
from forge_cli.rollout.result import RolloutResult
from forge_cli.traces.record import CallRecord
from forge_cli.train.samples import SamplePolicy, build_samples
from forge_cli.train.verl.convert import convert
from tests.requires import requires
from tests.train.test_samples_real import check_token_exact

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "recorded_rollouts" / "react.json"

VERL_SCRIPT = r'''
import asyncio, json, sys, types
import numpy as np, torch
sys.path.insert(0, sys.argv[3])
from verl import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.v1 import agent_loop_tq
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from forge_cli.train.verl.convert import LoopOutput, to_agent_loop_outputs

inp = json.load(open(sys.argv[1]))
L = lambda t: t.tolist()
out = {"as_dict": {}, "stored": {}}
Worker = agent_loop_tq.AgentLoopWorkerTQ.__ray_metadata__.modified_class
puts = []

async def kv_batch_put(keys, fields, tags, partition_id):
    puts.append((keys, fields, tags, partition_id))

async def kv_put(key, partition_id, tag):
    puts.append(([key], None, [tag], partition_id))

agent_loop_tq.tq = types.SimpleNamespace(async_kv_batch_put=kv_batch_put, async_kv_put=kv_put)
agent_loop_tq.list_of_dict_to_tensordict = lambda fields: fields  # keep the rows as dicts to read them back
worker = object.__new__(Worker)
worker.reward_loop_worker_handles, worker.distillation_enabled, worker.processor = None, False, None
worker.config = types.SimpleNamespace(actor_rollout_ref=types.SimpleNamespace(
    rollout=types.SimpleNamespace(n=2, val_kwargs=types.SimpleNamespace(n=1))))

def outputs(name):
    made = to_agent_loop_outputs([LoopOutput(**o) for o in inp["outputs"][name]])
    assert all(isinstance(o, AgentLoopOutput) for o in made)
    return made

for name in inp["outputs"]:
    out["as_dict"][name] = [{"rollout_log_probs": L(d["rollout_log_probs"]), "rm_scores": L(d["rm_scores"]),
                             "response_mask": L(d["response_mask"]), "responses": L(d["responses"]),
                             "prompts": L(d["prompts"]), "extra_fields": d["extra_fields"]}
                            for d in (o.as_dict() for o in outputs(name))]

# the V1 worker's postprocess: the group "g" = session 0 (merged, reward 1) and session 1 (split, reward 0)
group = {}
for session, name in enumerate(("merged", "split")):
    made = outputs(name)
    for o, reward in zip(made, [inp["rewards"][name]] * len(made)):
        o.reward_score = reward
    puts.clear()
    asyncio.run(Worker._agent_loop_postprocess(worker, made, False, uid="g", session_id=session, global_steps=3,
                                               raw_prompt=[]))
    (keys, fields, tags, partition), = puts
    out["stored"][name] = {"keys": keys, "tags": tags, "partition": partition,
                           "loss_mask": [L(f["loss_mask"]) for f in fields],
                           "rollout_log_probs": [L(f["rollout_log_probs"]) for f in fields],
                           "rm_scores": [L(f["rm_scores"]) for f in fields]}
    for key, f in zip(keys, fields):
        group[key] = f

# GRPO over the group with veRL's multi-trajectory advantage
keys = list(group)
width = max(len(group[k]["responses"]) for k in keys)
pad = lambda t: torch.nn.functional.pad(t.float(), (0, width - len(t)))
data = DataProto.from_dict(tensors={"token_level_rewards": torch.stack([pad(group[k]["rm_scores"]) for k in keys]),
                                    "response_mask": torch.stack([pad(group[k]["loss_mask"]) for k in keys])},
                           non_tensors={"uid": np.array(["g"] * len(keys), dtype=object)})
data = compute_advantage_for_multi_trajectories(data, keys, core_algos.AdvantageEstimator.GRPO,
                                                norm_adv_by_std_in_grpo=True)
out["advantages"] = {k: L(a) for k, a in zip(keys, data.batch["advantages"])}
out["adv_mask"] = {k: L(m) for k, m in zip(keys, data.batch["response_mask"])}

# an empty list: "Empty output", nothing stored
puts.clear()
asyncio.run(Worker._agent_loop_postprocess(worker, [], False, uid="e", session_id=0, global_steps=3, raw_prompt=[]))
out["empty_puts"] = len(puts)

# _run_prompt with session 0 returning [] and session 1 raising: the group's terminal status
async def fake_run(self, sampling_params, trajectory, trace, session_id, **prompt):
    if session_id == 1:
        raise RuntimeError("sandbox died")
    await Worker._agent_loop_postprocess(self, [], False, uid=prompt["uid"], session_id=session_id, global_steps=3)
for failing in (False, True):
    worker._run_agent_loop = types.MethodType(fake_run if failing else
                                              (lambda self, *a, session_id, **k: fake_run(self, *a, session_id=0, **k)),
                                              worker)
    puts.clear()
    asyncio.run(Worker._run_prompt(worker, {"uid": "p"}, {}, {"validate": False}))
    out["status_raise" if failing else "status_empty"] = [t["status"] for _, f, ts, _ in puts if f is None for t in ts]
json.dump(out, open(sys.argv[2], "w"))
'''


def _rollouts() -> dict[str, RunRollout]:
    raw = json.loads(FIXTURE.read_text())
    fields = {f.name for f in dataclasses.fields(CallRecord)}
    return {name: RunRollout(RolloutResult(**r["result"]),
                             [CallRecord(**{k: v for k, v in c.items() if k in fields}) for c in r["calls"]])
            for name, r in raw.items()}


@pytest.fixture(scope="module")
def verl(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    """(forge's side: rollouts, built, outputs; veRL's results) from one run of VERL_SCRIPT."""
    requires("verl")
    python = env_python("verl")
    rollouts = _rollouts()
    built = {name: build_samples(r, max_seq_len=None, policy=SamplePolicy()) for name, r in rollouts.items()}
    outputs = {name: [o.to_dict() for o in convert(b, global_steps=3)] for name, b in built.items()}
    work: Path = tmp_path_factory.mktemp("verl_loop")
    (work / "in.json").write_text(json.dumps({"outputs": outputs, "rewards": {"merged": 1.0, "split": 0.0}}))
    (work / "ref.py").write_text(VERL_SCRIPT)
    done = subprocess.run([str(python), str(work / "ref.py"), str(work / "in.json"), str(work / "out.json"),
                           str(REPO)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"veRL script failed:\n{done.stderr[-3000:]}"
    return {"rollouts": rollouts, "built": built, "outputs": outputs}, json.loads((work / "out.json").read_text())


def test_real_rollouts_merge_and_split_token_exactly(verl: tuple[dict[str, Any], dict[str, Any]]) -> None:
    forge, _ = verl
    for name, segments in (("merged", [3]), ("split", [1, 2])):
        built = forge["built"][name]
        assert [s.calls for s in built.samples] == segments
        check_token_exact(forge["rollouts"][name].calls, built.samples)


def test_as_dict_has_rollout_logprobs_and_the_reward_on_the_last_token(
        verl: tuple[dict[str, Any], dict[str, Any]]) -> None:
    forge, ref = verl
    for name, built in forge["built"].items():
        rows = ref["as_dict"][name]
        assert len(rows) == len(built.samples)
        for index, (row, sample) in enumerate(zip(rows, built.samples, strict=True)):
            assert row["prompts"] == sample.prompt_ids and row["responses"] == sample.response_ids
            assert row["response_mask"] == sample.loss_mask, "the mask covers exactly the sampled tokens"
            assert row["rollout_log_probs"] == pytest.approx(sample.rollout_logprobs)
            assert row["rm_scores"][-1] == pytest.approx(built.reward)
            assert not any(row["rm_scores"][:-1])
            extra = row["extra_fields"]
            assert (extra["forge_rollout_id"], extra["forge_segment"], extra["forge_segments"]) == \
                (built.rollout_id, index, len(built.samples))
            assert extra["forge_weight_versions"] == sample.weight_versions
            assert extra["reward_extra_info"]["score"] == pytest.approx(built.reward)
            assert (extra["min_global_steps"], extra["max_global_steps"]) == (0, 0), "weight version 0 recorded"


def test_v1_postprocess_stores_one_row_per_segment_with_the_reward_on_each(
        verl: tuple[dict[str, Any], dict[str, Any]]) -> None:
    forge, ref = verl
    for session, (name, reward) in enumerate((("merged", 1.0), ("split", 0.0))):
        stored, samples = ref["stored"][name], forge["built"][name].samples
        assert stored["keys"] == [f"g_{session}_{i}" for i in range(len(samples))]
        assert stored["partition"] == "train"
        assert all(t["status"] == "success" and t["min_global_steps"] == 0 for t in stored["tags"])
        assert stored["loss_mask"] == [s.loss_mask for s in samples]
        assert stored["rollout_log_probs"] == [pytest.approx(s.rollout_logprobs) for s in samples]
        assert [r[-1] for r in stored["rm_scores"]] == [reward] * len(samples)


def test_grpo_over_one_group_gives_each_rollout_one_advantage_of_opposite_sign(
        verl: tuple[dict[str, Any], dict[str, Any]]) -> None:
    _, ref = verl
    per_rollout: dict[str, set[float]] = {"0": set(), "1": set()}
    for key, advantages in ref["advantages"].items():
        session = key.split("_")[1]
        mask = ref["adv_mask"][key]
        assert sum(mask) > 0
        per_rollout[session] |= {round(a, 6) for a, m in zip(advantages, mask, strict=True) if m}
        assert all(a == 0 for a, m in zip(advantages, mask, strict=True) if not m)
    (winner,), (loser,) = per_rollout["0"], per_rollout["1"]
    assert winner > 0 > loser and winner == pytest.approx(-loser)


def test_empty_list_drops_the_rollout_and_an_exception_tags_the_group_failure(
        verl: tuple[dict[str, Any], dict[str, Any]]) -> None:
    _, ref = verl
    assert ref["empty_puts"] == 0, "an empty list stores nothing"
    assert ref["status_empty"] == ["running", "finished"], "empty lists: the group still finishes"
    assert ref["status_raise"] == ["running", "failure"], "an exception tags the whole group failure"
