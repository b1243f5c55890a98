"""What one training step does with its finished rollouts: reward shaping, samples, advantages, one update.

Shared by forge's loop and (per rollout) the veRL backend: DAPO's overlong reward shaping (``algo.overlong_*``)
on each rollout's reward -> records -> samples (``forge_cli/train/samples.py``, with the ``algo.timeout`` /
``over_length`` / ``drop_group_on_infra`` rules) -> one advantage per rollout from its group's rewards
(``forge_cli/train/algos.py``), broadcast to every segment -> one update.

It also says when a step cannot go on because the policy server is gone (``check_policy_server`` after the step's
rollouts, ``policy_server_sync`` around the weight sync): the run stops with one message naming the run directory
and ``forge train --resume RUN_DIR`` (exit 1; the last checkpoint is intact, so the run is resumable).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from forge_cli.config.schema import Experiment
from forge_cli.errors import UserError
from forge_cli.rollout.reader import RunRollout
from forge_cli.rollout.result import POLICY_SERVER_FAILED, RolloutResult
from forge_cli.train.backend import TrainerBackend
from forge_cli.train.samples import SamplePolicy


def sample_policy(exp: Experiment) -> SamplePolicy:
    """The sample builder's rules from the experiment (``trainer.max_seq_len`` and the ``algo`` options)."""
    a = exp.algo
    return SamplePolicy(max_seq_len=exp.trainer.max_seq_len, drop_group_on_infra=a.drop_group_on_infra,
                        timeout=a.timeout, over_length=a.over_length, advantage=a.advantage,
                        norm_adv_by_std=a.norm_adv_by_std, epsilon=a.epsilon)


def response_length(rollout: RunRollout) -> int:
    """A rollout's response length for overlong shaping: its longest completion, in tokens (each call's output is
    limited by ``model.max_output_tokens``, so that is where a rollout gets cut)."""
    return max((len(c.completion_token_ids) if c.completion_token_ids is not None else int(c.completion_tokens or 0)
                for c in rollout.calls if c.status == "ok"), default=0)


def shape_overlong(rollouts: Sequence[RunRollout], exp: Experiment) -> tuple[list[RunRollout], dict[str, float]]:
    """DAPO's overlong reward shaping on each rollout's reward (``algos.overlong_reward_shaping``): no change up to
    ``model.max_output_tokens - algo.overlong_buffer_tokens`` tokens, then a penalty growing linearly to
    ``algo.overlong_penalty_factor`` at the limit. A rollout without a reward counts as 0, as the sample builder
    does. Returns the rollouts (penalised ones with a new result) and the step's shaping metrics."""
    import torch

    from forge_cli.train.algos import overlong_reward_shaping

    buffer = exp.algo.overlong_buffer_tokens
    if buffer == 0 or not rollouts:
        return list(rollouts), {}
    rewards = torch.tensor([float(r.result.reward or 0.0) for r in rollouts], dtype=torch.float64)
    lengths = torch.tensor([response_length(r) for r in rollouts], dtype=torch.float64)
    shaped = overlong_reward_shaping(rewards, lengths, exp.model.max_output_tokens, buffer,
                                     exp.algo.overlong_penalty_factor)
    out: list[RunRollout] = []
    penalties: list[float] = []
    for rollout, before, after in zip(rollouts, rewards.tolist(), shaped.tolist(), strict=True):
        if after == before:
            out.append(rollout)
            continue
        penalties.append(after - before)
        out.append(RunRollout(replace(rollout.result, reward=after), rollout.calls))
    return out, {"overlong_penalized": float(len(penalties)),
                 "overlong_penalty_mean": sum(penalties) / len(rollouts)}


def train_on_step(trainer: TrainerBackend, rollouts: list[RunRollout], exp: Experiment) -> dict[str, Any]:
    """Shape the rewards, build the step's samples, set their advantages, run one update; the step's sample and
    train metrics."""
    from forge_cli.train.samples import build_batch

    rollouts, shaping = shape_overlong(rollouts, exp)
    # advantages over every rollout kept (also those that yielded no sample), one per rollout, on all its segments
    batch = build_batch(rollouts, sample_policy(exp))
    samples = [s for s in batch.samples if s.loss_tokens > 0 and s.advantage != 0.0]
    stats = {**shaping, **{f"samples_{k}": float(v) for k, v in batch.stats().items()}}
    if not samples:
        # every group's rewards were equal (or nothing was sampled): no gradient this step
        return {**stats, "train_tokens": 0.0, "skipped_update": 1.0}
    return {**stats, **trainer.train_step(samples), "skipped_update": 0.0}


# ---------------------------------------------------------------------------------------------- policy server loss

class PolicyServerLost(UserError):
    """The policy server stopped answering during a training step (a machine problem: exit 1)."""

    def __init__(self, message: str, run_dir: Path) -> None:
        super().__init__(f"{message}; the run stopped at its last checkpoint in {run_dir}",
                         fix=f"check the policy server (its log, memory, the GPU), then continue with: "
                             f"forge train --resume {run_dir}", exit_code=1)
        self.run_dir = run_dir


def failed_on_policy_server(result: RolloutResult) -> bool:
    """The rollout ended because its calls got no answer from the policy server (``ending_status``)."""
    return result.status == "infra_error" and POLICY_SERVER_FAILED in (result.error or "")


def check_policy_server(upstream: str, results: Sequence[RolloutResult], run_dir: Path, step: int) -> None:
    """After a step's rollouts: raise :class:`PolicyServerLost` when every rollout failed on the policy server, or
    some did and it no longer answers ``/health``. Nothing of the step is trained then; the last checkpoint stays
    the resume point. ``step`` is 0-based (the message counts from 1)."""
    from forge_cli.serve.server import health

    failed = [r for r in results if failed_on_policy_server(r)]
    if not failed:
        return
    if len(failed) < len(results) and health(upstream):
        return
    raise PolicyServerLost(f"the policy server at {upstream} stopped answering during step {step + 1} "
                           f"({len(failed)} of {len(results)} rollouts failed on it: {failed[-1].error})", run_dir)


@contextlib.contextmanager
def policy_server_sync(upstream: str, run_dir: Path, step: int) -> Iterator[None]:
    """Around the weight sync of step ``step`` (1-based: the checkpoint ``step-N`` being served): a failed update
    (``WeightUpdateError``, the server unreachable) becomes :class:`PolicyServerLost`. The checkpoint is saved
    before the sync, so ``--resume`` serves it and goes on."""
    import httpx

    from forge_cli.serve.weights import WeightUpdateError

    try:
        yield
    except (WeightUpdateError, httpx.HTTPError) as error:
        raise PolicyServerLost(f"the policy server at {upstream} failed the weight update after step {step}: "
                               f"{error}", run_dir) from error
