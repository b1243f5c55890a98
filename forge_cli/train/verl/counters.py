"""forge's rollout counters in veRL's logged metrics.

veRL 0.9.1's V1 trainer logs what its rows carry and what its sampler returns; an agent loop's own metrics are
dropped (``AgentLoopMetrics`` keeps fixed fields, V1 never reads them while training) and a dropped rollout has no
row. So each agent-loop worker process keeps forge's counts (rollouts per ending status, dropped rollouts per reason,
the sample builder's ``RolloutStats``) in a JSON file of its own under the run's ``rollouts/counters/``, rewritten
after every rollout, and forge's sampler (``remote/verl/sampler.py: ForgeReplayBuffer``, in the trainer's process)
adds what the files gained since its last batch to the step's metrics, under ``forge/`` (names with ``total`` are
summed by veRL's ``MetricsAggregator`` over a step's local updates).

Importable without veRL (the agent loop and the sampler use it inside veRL's environment; tests here).
"""

from __future__ import annotations

import json
import os
import socket
from collections import Counter
from pathlib import Path
from typing import Any

from forge_cli.train.samples import BuiltRollout, RolloutStats


class WorkerCounters:
    """One worker process's counts since it started, written to ``directory/<host>-<pid>.json``."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / f"{socket.gethostname()}-{os.getpid()}.json"
        self.status: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        self.stats = RolloutStats()

    def record(self, status: str, built: BuiltRollout | None = None, dropped: str | None = None) -> None:
        """One rollout: its ending status, why it was dropped (if it was) and how its calls became samples."""
        self.status[status] += 1
        if dropped is not None:
            self.dropped[dropped] += 1
        if built is not None:
            self.stats.add(built.stats)
        self.flush()

    def flush(self) -> None:
        """The counts to the worker's file, atomically (the sampler may read it at any time)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"status": dict(self.status), "dropped": dict(self.dropped),
                                   "stats": self.stats.to_dict()}))
        os.replace(tmp, self.path)


def read_totals(directory: Path) -> dict[str, float]:
    """Every worker's counts summed, as flat metric names (``forge/rollouts_total/<status>``,
    ``forge/dropped_total/<reason>``, ``forge/samples_total/<RolloutStats field>``, ``.../reasons/<reason>``)."""
    totals: dict[str, float] = {}

    def add(name: str, value: float) -> None:
        totals[name] = totals.get(name, 0.0) + value

    for path in sorted(directory.glob("*.json")):
        try:
            data: dict[str, Any] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a file being replaced: read again at the next batch
        for status, n in data.get("status", {}).items():
            add(f"forge/rollouts_total/{status}", n)
        for reason, n in data.get("dropped", {}).items():
            add(f"forge/dropped_total/{reason}", n)
        for name, value in data.get("stats", {}).items():
            if name == "reasons":
                for reason, n in value.items():
                    add(f"forge/samples_total/reasons/{reason}", n)
            elif isinstance(value, int | float) and not isinstance(value, bool) and name != "merge_share":
                add(f"forge/samples_total/{name}", value)
    return totals


class Deltas:
    """What the counters gained since the previous call (a step's share of the run's counts)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.last: dict[str, float] = {}

    def __call__(self) -> dict[str, float]:
        now = read_totals(self.directory)
        out = {k: v - self.last.get(k, 0.0) for k, v in now.items()}
        self.last = now
        merged, transitions = out.get("forge/samples_total/merged", 0.0), out.get("forge/samples_total/transitions")
        if transitions:
            out["forge/samples/merge_share"] = merged / transitions
        return out
