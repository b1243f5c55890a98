"""forge's agent loop driven by veRL 0.9.1's own V1 worker, on CPU: the rows veRL stores equal the proxy's records.

``WORKER`` runs in veRL's environment. It composes veRL's config from ``forge train trainer=verl``'s plan, builds
``AgentLoopWorkerTQ`` with veRL's own ``__init__`` (its ``HFModelConfig``, tokenizer, dataset class and the
agent-loop registry read from the ``agent_loops.yaml`` forge wrote), reads a task row with veRL's ``RLHFDataset``
from forge's ``train.parquet`` and runs ``_run_prompt``: veRL spawns ``rollout.n`` sessions, each through
``_run_agent_loop`` (``hydra.utils.instantiate`` of ``ForgeHarnessAgentLoop`` with veRL's wrappers, then its
``run``) and ``_agent_loop_postprocess`` with the real ``list_of_dict_to_tensordict``. Stand-ins only for what
needs Ray and GPUs: the server manager hands out forge's CPU vLLM as the replica, and TransferQueue (a Ray service)
is a recorder of the puts, as veRL's own CPU tests fake it. The harness is forge's react agent in local sandboxes.

The rows are then checked here against the capture proxy's records of the same rollouts: each row's prompt and
response tokens are a contiguous stretch of its rollout's recorded token stream, the response mask is 1 exactly
on sampled tokens (every call's completion, once, in order), the reward sits on the last token, and a rollout
longer than ``trainer.max_seq_len`` gives several rows under one uid. (A row is a stretch of the stream of the call
that ends it: a rollout whose prompts stop extending one another has several segments.)
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from forge_cli.config.compose import compose
from forge_cli.paths import env_python
from forge_cli.serve.server import PolicyServer
from forge_cli.testing.tool_relay import ToolRelay
from forge_cli.train.verl.launch import plan, write_inputs

REPO = Path(__file__).resolve().parents[2]
MAX_SEQ_LEN = 128

WORKER = r'''
import asyncio, json, os, sys, types
sys.path.insert(0, sys.argv[3])
from hydra import compose, initialize_config_dir
import verl
from verl.trainer.ppo.v1 import agent_loop_tq
from verl.utils.dataset.rl_dataset import RLHFDataset
plan, upstream = json.load(open(sys.argv[1])), sys.argv[2]
argv = plan["command"]
with initialize_config_dir(config_dir=os.path.join(os.path.dirname(verl.__file__), "trainer", "config"),
                           version_base=None):
    cfg = compose(config_name=argv[3].split("=", 1)[1], overrides=argv[4:])
puts = []


async def kv_batch_put(keys, fields, tags, partition_id):
    puts.append({"keys": keys, "tags": tags, "fields": fields})


async def kv_put(key, partition_id, tag):
    puts.append({"keys": [key], "tags": [tag], "fields": None})


agent_loop_tq.tq = types.SimpleNamespace(init=lambda: None, async_kv_batch_put=kv_batch_put, async_kv_put=kv_put)


class ServerManager:  # veRL's AsyncLLMServerManager needs Ray and GPU replicas: forge's CPU vLLM is the replica
    async def _acquire_server(self, request_id):
        return upstream, None

    def _release_server(self, server_id, request_id=None):
        pass


Worker = agent_loop_tq.AgentLoopWorkerTQ.__ray_metadata__.modified_class
worker = Worker(config=cfg, llm_client=ServerManager())
rows = RLHFDataset(data_files=[cfg.data.train_files], tokenizer=worker.tokenizer, config=cfg.data)
prompt = dict(rows[0])
prompt.update(uid="u0", global_steps=1)
config = cfg.actor_rollout_ref.rollout
sampling = dict(temperature=config.temperature, top_p=config.top_p, top_k=config.top_k, repetition_penalty=1.0,
                logprobs=config.calculate_log_probs)
trajectory = {"validate": False, "step": 1, "sample_index": 0, "rollout_n": 0}
asyncio.run(worker._run_prompt(prompt, sampling, trajectory=trajectory, trace=False))
from forge_cli.remote.verl.agent_loop import close_runtime
close_runtime()
out = {"task": str(prompt["forge_task_id"]), "status": [t["status"] for p in puts if p["fields"] is None
                                                        for t in p["tags"]], "rows": []}
for p in puts:
    if p["fields"] is None:
        continue
    td = p["fields"]
    for i, key in enumerate(p["keys"]):
        row = td[i]
        out["rows"].append({"key": key, "prompts": row["prompts"].tolist(), "responses": row["responses"].tolist(),
                            "response_mask": row["response_mask"].tolist(), "input_ids": row["input_ids"].tolist(),
                            "rm_scores": row["rm_scores"].tolist(), "uid": str(row["uid"]),
                            "rollout_log_probs": row["rollout_log_probs"].tolist()})
print(json.dumps(out))
'''


def _records(rollouts: Path) -> dict[str, list[dict[str, Any]]]:
    """The proxy's ok calls per rollout (every worker run directory under ``rollouts``), in order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for store in rollouts.rglob("traces.sqlite"):
        conn = sqlite3.connect(store)
        conn.row_factory = sqlite3.Row
        for row in conn.execute("SELECT rollout_id, prompt_token_ids, completion_token_ids, completion_logprobs, "
                                "upstream_request, response FROM calls WHERE status = 'ok' ORDER BY rollout_id, seq"):
            out.setdefault(row["rollout_id"], []).append(
                {k: json.loads(row[k]) for k in ("prompt_token_ids", "completion_token_ids", "completion_logprobs",
                                                 "upstream_request", "response")})
        conn.close()
    return out


def _check_rows(got: dict[str, Any], records: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """The rows veRL stored, checked against the proxy's records of the same rollouts (see the module docstring);
    returns them by session."""
    assert len(records) == 2  # rollout.n sessions, each one forge rollout behind the proxy
    by_session: dict[str, list[dict[str, Any]]] = {}
    for row in got["rows"]:
        uid, session, _index = row["key"].rsplit("_", 2)
        assert uid == row["uid"] == "u0"  # every row of every session under the prompt's uid
        by_session.setdefault(session, []).append(row)
    assert len(by_session) == 2
    # each call's recorded stream (its prompt then its completion); a rollout whose prompts stop extending one another
    # (an answer cut at max_tokens that the harness sends back differently) starts a new segment, so a row is a
    # stretch of the stream of the call that ends it, not necessarily of the last call's
    streams = {rid: [c["prompt_token_ids"] + c["completion_token_ids"] for c in calls]
               for rid, calls in records.items()}
    for rows in by_session.values():
        # the rollout these rows came from: the one whose recorded streams hold the first row
        first = rows[0]["prompts"] + rows[0]["responses"]
        rid = next(r for r, ss in streams.items() if any(_stretch(first, s) >= 0 for s in ss))
        calls = records[rid]
        sampled: list[int] = []
        for row in rows:
            full = row["prompts"] + row["responses"]
            assert row["input_ids"] == full
            assert any(_stretch(full, s) >= 0 for s in streams[rid]), \
                "a row that is not a stretch of the recorded tokens"
            mask = row["response_mask"]
            assert len(mask) == len(row["responses"]) == len(row["rollout_log_probs"])
            sampled += [t for t, m in zip(row["responses"], mask, strict=True) if m]
            reward = row["rm_scores"]
            assert all(r == 0 for r in reward[:-1]) and len(reward) == len(row["responses"])
        # the mask covers exactly the sampled tokens: every call's completion once, in order
        assert sampled == [t for c in calls for t in c["completion_token_ids"]]
    return by_session


def _run_worker(exp: Any, tmp_path: Path, replica: str) -> dict[str, Any]:
    """``WORKER`` in veRL's environment on ``exp``'s plan, with ``replica`` as veRL's rollout server; its output."""
    launch = plan(exp, tmp_path / "run")
    write_inputs(launch, exp.model_dump(mode="json"))
    (tmp_path / "plan.json").write_text(json.dumps(launch.to_dict()))
    (tmp_path / "worker.py").write_text(WORKER)
    done = subprocess.run([str(env_python("verl")), str(tmp_path / "worker.py"), str(tmp_path / "plan.json"),
                           replica, str(REPO)], capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]
    got: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["status"][-1] == "finished" and got["rows"], got["status"]
    return got


def _stretch(needle: list[int], hay: list[int]) -> int:
    """Where ``needle`` starts as a contiguous stretch of ``hay`` (-1: nowhere)."""
    n = len(needle)
    return next((i for i in range(len(hay) - n + 1) if hay[i:i + n] == needle), -1)


@pytest.mark.requires("verl", "model", "mitmproxy", "bubblewrap")
def test_verl_worker_stores_the_proxys_tokens(tmp_path: Path, policy_server: PolicyServer) -> None:
    # answers of at most 48 tokens in rows of at most 128: a rollout of two or more calls spans more than one row
    # (its answers and the tool output between them), and no single answer is too long for a row
    exp = compose(["trainer=verl", "trainer.n_gpus_per_node=1", "trainer.tasks_per_step=1", "algo.group_size=2",
                   f"trainer.max_seq_len={MAX_SEQ_LEN}", f"trainer.micro_batch_tokens={MAX_SEQ_LEN}",
                   "harness.env.FORGE_MAX_TOKENS='48'", f"run.output_dir={tmp_path}"]).experiment
    got = _run_worker(exp, tmp_path, policy_server.url)
    records = _records(tmp_path / "run" / "rollouts")
    by_session = _check_rows(got, records)
    lengths = {r: [len(c["prompt_token_ids"]) + len(c["completion_token_ids"]) for c in cs]
               for r, cs in records.items()}
    assert any(len(rows) > 1 for rows in by_session.values()), \
        f"no rollout split at trainer.max_seq_len={MAX_SEQ_LEN}: {lengths}"


@pytest.mark.e2e  # pi in docker beside the shared vLLM: ~40 s here (make test-e2e, keeping make test under 40 min)
@pytest.mark.requires("verl", "model", "mitmproxy", "docker", "harness:pi")
def test_verl_worker_with_pi_and_a_tool_call(tmp_path: Path, policy_server: PolicyServer) -> None:
    """The same through a real harness whose transcript holds a tool call: pi in docker, each rollout's first call
    answered with a tool call (vLLM's ``tool_choice: required``), which pi runs and sends back."""
    with ToolRelay(policy_server.url, tool_turns=1) as relay:
        exp = compose(["trainer=verl", "+harness=pi", "runtime=docker", "trainer.n_gpus_per_node=1",
                       "trainer.tasks_per_step=1", "algo.group_size=2", "trainer.max_seq_len=4096",
                       "trainer.micro_batch_tokens=4096", "model.max_output_tokens=96",
                       f"run.output_dir={tmp_path}"]).experiment
        got = _run_worker(exp, tmp_path, relay.url)
    records = _records(tmp_path / "run" / "rollouts")
    _check_rows(got, records)
    assert relay.forced >= 2
    for rid, calls in records.items():
        # the first answer is a tool call of one of pi's tools, and pi sent its result back in the next call
        first = calls[0]
        offered = {t["function"]["name"] for t in first["upstream_request"]["tools"]}
        tool_calls = first["response"]["choices"][0]["message"].get("tool_calls") or []
        assert tool_calls and tool_calls[0]["function"]["name"] in offered, (rid, first["response"])
        assert len(calls) >= 2, rid
        results = [m for m in calls[1]["upstream_request"]["messages"] if m.get("role") == "tool"]
        assert results and results[0]["tool_call_id"] == tool_calls[0]["id"], calls[1]["upstream_request"]
