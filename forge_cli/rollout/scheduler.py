"""Run many rollouts concurrently, appending each result to disk as it lands, with live progress."""

from __future__ import annotations

import asyncio
import json
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from forge_cli.rollout.result import RolloutResult
from forge_cli.rollout.runner import RolloutJob, RunContext, run_rollout

# called after each rollout with (result, done so far, total)
OnResult = Callable[[RolloutResult, int, int], None]


class ResultLog:
    """``results.jsonl``: one line per finished rollout, flushed and synced (nothing lost on a crash)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = path.open("a", encoding="utf-8")

    def append(self, result: RolloutResult) -> None:
        self._file.write(json.dumps(result.to_dict()) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


async def run_all(ctx: RunContext, jobs: list[RolloutJob], concurrency: int, log: ResultLog,
                  on_start: Callable[[RolloutJob], None] | None = None,
                  on_result: OnResult | None = None) -> list[RolloutResult]:
    """Run ``jobs`` with at most ``concurrency`` in flight; results in job order."""
    gate = asyncio.Semaphore(concurrency)
    done = 0

    async def one(job: RolloutJob) -> RolloutResult:
        nonlocal done
        async with gate:
            if on_start:
                on_start(job)
            result = await run_rollout(ctx, job)
        log.append(result)
        done += 1
        if on_result:
            on_result(result, done, len(jobs))
        return result

    return list(await asyncio.gather(*(one(job) for job in jobs)))


def summarise(results: list[RolloutResult]) -> dict[str, object]:
    """Counts by status, mean reward, calls and tokens of a run."""
    rewards = [r.reward for r in results if r.reward is not None]
    return {
        "rollouts": len(results),
        "status": dict(Counter(r.status for r in results)),
        "mean_reward": round(sum(rewards) / len(rewards), 4) if rewards else None,
        "solved": sum(1 for r in rewards if r > 0),
        "calls": sum(r.calls for r in results),
        "prompt_tokens": sum(r.prompt_tokens for r in results),
        "completion_tokens": sum(r.completion_tokens for r in results),
    }
