"""``ForgeHarnessAgentLoop``: one forge rollout (harness in its sandbox, capture proxy, verifier) as a veRL 0.9.1
agent loop. Imported only inside veRL's environment (``$FORGE_HOME/envs/verl``, with forge installed into it).

Registered through an agent-loop YAML (``actor_rollout_ref.rollout.agent.agent_loop_config_path``)::

    - name: forge_harness
      _target_: forge_cli.remote.verl.agent_loop.ForgeHarnessAgentLoop
      forge_config: RUN_DIR/config.yaml          # forge's experiment (forge train trainer=verl writes both)
      forge_rollouts_dir: RUN_DIR/rollouts       # each worker's rollout session writes its run directory here

and chosen per dataset row (``agent_name``). A dataset row carries forge's task id (``forge_task_id``).

Per worker process (veRL instantiates the class once per rollout; the session is shared, one per process): the
forge experiment is read once, its proxy's upstream is one of veRL's vLLM replicas (acquired from veRL's load
balancer once per worker: every rollout of a worker goes to that replica), and a ``RolloutSession`` starts the
capture proxy, tool server and services. Each ``run``: the proxy's weight version is veRL's ``global_steps`` (right in
``trainer.v1.trainer_mode=sync``, whose weight sync drains in-flight requests first; the async modes abort them
and a harness would see a broken answer), forge runs the rollout, reads its records, builds its segments with
forge's sample builder and returns ``convert``'s outputs as veRL ``AgentLoopOutput``s.

The session's lifetime is the worker process's: it is started on a thread kept for the process's life, so the
capture proxy, tool server and services it starts carry a parent-death signal (they end when the worker ends, even
killed), and it is closed at interpreter exit (``atexit``: processes stopped, sandboxes removed, results flushed).

What veRL 0.9.1's V1 path does with what an agent loop returns (read in its code):

- An exception from ``run`` (``verl/trainer/ppo/v1/agent_loop_tq.py:107-147``, ``_run_prompt``): the other sessions
  of the prompt finish, the error is logged, and the prompt (the whole GRPO group) is tagged ``failure``. Nothing
  is stored for the failed session. The step is not killed: by default (``sync_refill_failed_groups=False``) a
  failed group stays sampleable with the rows its other sessions stored (``verl/trainer/ppo/v1/replay_buffer.py:
  110-113, 317-343``); with ``sync_refill_failed_groups=True`` a failed group that stored no row at all is evicted
  and refilled.
- An empty list (``agent_loop_tq.py:150-158``, ``_agent_loop_postprocess``): "Empty output" is logged, nothing is
  stored for that session, and the group ends ``finished``. A ``finished`` group that stored no row crashes the
  step: with DAPO's filter (``replay_buffer.py:279,303-307``, "Finished groups are missing DAPO metric") and, when
  every group of the step is empty, without it ("selected terminal groups with no materializable trajectories").

So a dropped rollout (an infra failure, or forge's own drop: ``BuiltRollout.dropped``) raises ``RolloutDropped``,
counted (``counters``: veRL's step metrics get them through forge's sampler) and logged, and forge sets
``trainer.v1.sampler.sync_refill_failed_groups=true`` (``mapping.overrides``): the group trains on its other
rollouts, as in forge's own loop, and a group left with none is evicted and refilled with new prompts instead of
crashing the step. A group left with one rollout trains with its reward as its advantage (GRPO's mean 0 and std 1
for a group of one, ``v1/utils.py`` over the rollout's final
row), as forge's ``algos.rollout_advantages`` does. Not verified here: a run against live veRL replicas
(needs GPUs and vLLM); the CPU tests cover ``convert``, veRL's postprocess and its advantages on real records.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase

from forge_cli.procs import lives_with_process
from forge_cli.rollout.reader import RunRollout
from forge_cli.traces.store import iter_calls, open_store
from forge_cli.train.verl.convert import convert, to_agent_loop_outputs
from forge_cli.train.verl.counters import WorkerCounters

log = logging.getLogger(__name__)

# this worker process's rollouts per status, drops per reason and sample-builder stats (counters.py)
_COUNTERS: dict[str, WorkerCounters] = {}


def counters(rollouts_dir: str) -> WorkerCounters:
    """This process's counters, written under the run's ``rollouts/counters/`` (read by ``sampler``)."""
    if rollouts_dir not in _COUNTERS:
        _COUNTERS[rollouts_dir] = WorkerCounters(Path(rollouts_dir) / "counters")
    return _COUNTERS[rollouts_dir]


class RolloutDropped(Exception):
    """A rollout forge does not train on (why: ``reason``): veRL tags its group ``failure`` (see the module doc)."""

    def __init__(self, task_id: str, reason: str) -> None:
        super().__init__(f"forge rollout of task {task_id} dropped: {reason}")
        self.reason = reason


@dataclass
class _Runtime:
    """What every rollout of one veRL worker process shares: forge's session and its tasks by id."""

    session: Any
    tasks: dict[str, Any]
    policy: Any
    exp: Any


_RUNTIME: _Runtime | None = None
_LOCK = asyncio.Lock()
# the thread that starts the session: kept for the process's life, so the session's children die with the process
_STARTER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="forge-session", initializer=lives_with_process)


def close_runtime() -> None:
    """Close this worker's session (proxy, tool server, services, sandboxes); run at interpreter exit."""
    global _RUNTIME
    runtime, _RUNTIME = _RUNTIME, None
    if runtime is not None:
        with contextlib.suppress(Exception):
            runtime.session.__exit__(None, None, None)


atexit.register(close_runtime)


def _start(config: str, rollouts_dir: str, upstream: str) -> _Runtime:
    """forge's experiment (the run's ``config.yaml``) with the replica as the proxy's upstream, its rollouts under
    ``rollouts_dir``; the tasks of the train and eval splits by id; a rollout session entered."""
    import httpx
    import yaml

    from forge_cli.envs.resolve import validate_experiment
    from forge_cli.envs.source import load_tasks
    from forge_cli.rollout.session import RolloutSession
    from forge_cli.train.step import sample_policy

    data = yaml.safe_load(Path(config).read_text())
    # the name the replica serves (forge starts veRL's replicas with served_model_name=model.served_name)
    served = httpx.get(f"{upstream.rstrip('/')}/v1/models", timeout=60).json()["data"][0]["id"]
    data["model"] = {**data.get("model", {}), "served_name": served}
    data["proxy"] = {**data.get("proxy", {}), "upstream": upstream, "port": 0}
    data["run"] = {**data.get("run", {}), "output_dir": rollouts_dir}
    exp = validate_experiment(data)
    taskset = load_tasks(exp.env, exp.rollout.max_tasks, purpose="train")
    tasks = {t.id: t for t in taskset.tasks}
    eval_env = exp.env.model_copy(update={"split": exp.trainer.eval_split, "task_ids": None, "max_tasks": None})
    try:
        tasks.update({t.id: t for t in load_tasks(eval_env, exp.trainer.eval_max_tasks, purpose="validate").tasks})
    except Exception:
        log.info("no eval split: validation rows are train tasks")
    session = RolloutSession(exp, data, taskset, lambda line: log.info("%s", line))
    session.__enter__()  # closed by close_runtime at exit
    return _Runtime(session=session, tasks=tasks, policy=sample_policy(exp), exp=exp)


async def _replica(server_manager: Any) -> str:
    """One replica's address from veRL's load balancer (its server ids are the replicas' HTTP addresses)."""
    request_id = f"forge-{time.monotonic_ns()}"
    server_id, _handle = await server_manager._acquire_server(request_id)
    server_manager._release_server(server_id, request_id=request_id)
    address = str(server_id)
    return address if address.startswith("http") else f"http://{address}"


class ForgeHarnessAgentLoop(AgentLoopBase):
    """One dataset row (a forge task) -> one forge rollout -> its segments as ``AgentLoopOutput``s (``[]``: dropped)."""

    def __init__(self, *args: Any, forge_config: str = "", forge_rollouts_dir: str = "", **kwargs: Any) -> None:
        kwargs.pop("tools", None)  # veRL passes its own tool list; forge's tools come from the env
        kwargs.pop("name", None)  # the registration's own name
        super().__init__(*args, **kwargs)
        self.forge_config, self.forge_rollouts_dir = str(forge_config), str(forge_rollouts_dir)

    async def _runtime(self) -> _Runtime:
        global _RUNTIME
        async with _LOCK:
            if _RUNTIME is None:
                upstream = await _replica(self.server_manager)
                _RUNTIME = await asyncio.wrap_future(
                    _STARTER.submit(_start, self.forge_config, self.forge_rollouts_dir, upstream))
            return _RUNTIME

    async def run(self, sampling_params: dict[str, Any], **fields: Any) -> list[Any]:
        from forge_cli.rollout.runner import run_rollout
        from forge_cli.train.samples import build_samples
        from forge_cli.train.step import shape_overlong

        step = int(fields.get("global_steps", 0))
        task_id = str(fields["forge_task_id"])
        started = time.monotonic()
        try:
            runtime = await self._runtime()
            session = runtime.session
            job = session.job(runtime.tasks[task_id], int(fields.get("session_id", 0)), step)
            await asyncio.to_thread(session.proxy.set_weight_version, str(step))
            result = await run_rollout(session.ctx, job)
            session.log.append(result)

            def records() -> list[Any]:
                conn = open_store(session.run_dir / "traces.sqlite", readonly=True)
                try:
                    return list(iter_calls(conn, job.rollout_id))
                finally:
                    conn.close()

            calls = await asyncio.to_thread(records)
        except Exception as e:  # an infra failure: drop the rollout (its group trains on the others)
            log.exception("forge rollout of task %s failed; dropped", task_id)
            counters(self.forge_rollouts_dir).record("exception", dropped="exception")
            raise RolloutDropped(task_id, f"exception: {e}") from e
        # DAPO's overlong shaping on the reward, as forge's own loop does (forge sets veRL's reward_score)
        shaped, _ = shape_overlong([RunRollout(result, calls)], runtime.exp)
        built = build_samples(shaped[0], max_seq_len=runtime.policy.max_seq_len, policy=runtime.policy)
        counters(self.forge_rollouts_dir).record(result.status, built, built.dropped)
        if built.dropped is not None:
            log.warning("forge rollout %s dropped: %s", job.rollout_id, built.dropped)
            raise RolloutDropped(task_id, built.dropped)
        outputs = convert(built, global_steps=step,
                          metrics={"generate_sequences": time.monotonic() - started})
        return to_agent_loop_outputs(outputs)
