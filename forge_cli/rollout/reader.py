"""Read a run directory back: each rollout's result (reward, status) joined with its recorded calls (tokens).

This is the one place that joins ``results.jsonl`` with ``traces.sqlite``; the sample builder, exports and
reports read runs through it. A rollout attempted more than once (an eval retry) appears once per attempt.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from forge_cli.errors import UserError
from forge_cli.rollout.result import RolloutResult
from forge_cli.traces.record import CallRecord
from forge_cli.traces.store import iter_calls, open_store, resolve_record


@dataclass(frozen=True)
class RunRollout:
    """One finished rollout: its result and its calls in sequence order."""

    result: RolloutResult
    calls: list[CallRecord]


def read_results(run_dir: Path) -> list[RolloutResult]:
    """Every result of a run directory in the order they ended (a torn last line from a crash is skipped)."""
    path = run_dir / "results.jsonl"
    if not path.is_file():
        return []
    results = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            results.append(RolloutResult.from_dict(json.loads(line)))
        except (json.JSONDecodeError, TypeError):
            continue
    return results


def read_run(run_dir: Path, step: int | None = None) -> Iterator[RunRollout]:
    """The run's rollouts (of batch ``step`` only, when given) with their calls from the trace store."""

    if not (run_dir / "results.jsonl").is_file():
        raise UserError(f"{run_dir} is not a run directory (no results.jsonl)", exit_code=2)
    results = [r for r in read_results(run_dir) if step is None or r.step == step]
    store = run_dir / "traces.sqlite"
    conn = open_store(store, readonly=True) if store.is_file() else None
    try:
        for result in results:
            # images come back from the store's blobs: a vision-language sample needs them
            calls = [resolve_record(conn, c) for c in iter_calls(conn, result.rollout_id)] if conn is not None else []
            yield RunRollout(result, calls)
    finally:
        if conn is not None:
            conn.close()
