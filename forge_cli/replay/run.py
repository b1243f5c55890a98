"""``forge rollout --replay RUN/ROLLOUT --until K``: a recorded rollout's task again, in a fresh sandbox with the same
harness, its first K model calls answered from the recording while the harness runs its tool calls for real.

The experiment is the recorded run's own (``config.yaml``; ``key=value`` overrides on top, e.g. another
``model.path`` for the calls after K). The policy server starts as for any run; a ``ReplayUpstream`` sits in front
of it and the capture proxy sends it every call, naming the call's rollout. The new run directory is an ordinary
one (``results.jsonl``, ``traces.sqlite``, the rollout's logs) plus ``replay.json``: where the recording came from,
which calls were answered from it, which were sampled live, the first divergence with the text around it, and
the share of prompt tokens the harness's ``replay_volatile`` patterns excused. A divergent replay ends
``infra_error`` (its samples are never built).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forge_cli.config.schema import Experiment
from forge_cli.envs.source import TaskSet, open_source
from forge_cli.envs.task import Task
from forge_cli.errors import UserError
from forge_cli.replay.compare import patterns
from forge_cli.replay.script import Recorded, find_rollout, script
from forge_cli.rollout.reader import RunRollout
from forge_cli.rollout.result import RolloutResult

if TYPE_CHECKING:
    from forge_cli.replay.server import ReplayUpstream

Say = Callable[[str], None]


def split_reference(reference: str) -> tuple[Path, str]:
    """``RUN_DIR/ROLLOUT_ID`` -> (run directory, rollout id); UserError when it does not name one."""
    path = Path(reference).expanduser()
    run_dir, rollout_id = path.parent, path.name
    if not rollout_id or not (run_dir / "results.jsonl").is_file():
        raise UserError(f"--replay {reference}: give RUN_DIR/ROLLOUT_ID, a run directory holding results.jsonl and "
                        "one of its rollout ids", fix="e.g. --replay runs/forge-20261207-101500-ab12/<rollout id> "
                        "(the ids are in results.jsonl)", exit_code=2)
    return run_dir.resolve(), rollout_id


def replay_experiment(run_dir: Path, overrides: list[str], concurrency: int = 1) -> tuple[Experiment, dict[str, Any]]:
    """The recorded run's experiment with ``key=value`` overrides, on one local proxy (a replay upstream needs
    it) and run by a one-rollout session."""
    import yaml
    from omegaconf import OmegaConf

    from forge_cli.envs.resolve import validate_experiment

    config = run_dir / "config.yaml"
    data = yaml.safe_load(config.read_text()) if config.is_file() else None
    if not isinstance(data, dict):
        raise UserError(f"--replay: {run_dir} holds no experiment (config.yaml)", exit_code=2)
    bad = [o for o in overrides if "=" not in o or o.startswith("+")]
    if bad:
        raise UserError(f"replay overrides are key=value on the recorded experiment: {', '.join(bad)}",
                        fix="e.g. model.path=/path/to/checkpoint runtime.kind=docker", exit_code=2)
    merged = OmegaConf.to_container(OmegaConf.merge(OmegaConf.create(data), OmegaConf.from_dotlist(overrides)))
    assert isinstance(merged, dict)
    merged.setdefault("proxy", {}).update({"url": None, "replicas": 1})
    merged.setdefault("rollout", {})["concurrency"] = concurrency
    data = {str(k): v for k, v in merged.items()}
    return validate_experiment(data), data


def find_task(exp: Experiment, task_id: str) -> TaskSet:
    """The task ``task_id`` from the experiment's env, whichever split holds it."""
    source = open_source(exp.env)
    order = [*([exp.env.split] if exp.env.split else []), source.default_split("train"),
             source.default_split("eval"), *source.splits(), None]
    seen: set[str | None] = set()
    for split in order:
        if split in seen or (split is not None and split not in source.splits()):
            continue
        seen.add(split)
        tasks: list[Task] = [t for t in source.load(split) if t.id == task_id]
        if tasks:
            return TaskSet(tasks=tasks[:1], split=split, note=f"task {task_id} (split '{split}')", source=source)
    raise UserError(f"the env '{exp.env.name}' no longer has task {task_id!r}", exit_code=2)


@dataclass
class Replayed:
    """Continuations run from one recording: the new run directory, each rollout's result and replay report."""

    run_dir: Path
    results: list[RolloutResult]
    reports: list[dict[str, Any]]


def run_continuations(run_dir: Path, original: RunRollout, calls: list[Recorded], overrides: list[str], say: Say,
                      n: int = 1, group: str | None = None) -> Replayed:
    """``n`` rollouts of ``original``'s task in one new run, each with ``calls`` answered from the recording and the
    rest live (``prefix_calls`` set: the recorded answers carry no loss), in group ``group`` (None: the session's)."""
    from forge_cli.rollout.runner import RolloutJob
    from forge_cli.rollout.session import RolloutSession
    from forge_cli.serve.tokenizer import model_dir_of_run

    exp, data = replay_experiment(run_dir, overrides, concurrency=n)
    taskset = find_task(exp, original.result.task_id)
    relay = replay_relay(exp, model_dir_of_run(run_dir))
    session = RolloutSession(exp, data, taskset, say, relay=relay)
    with session:
        upstream: ReplayUpstream = session.relay_server
        base = [session.job(taskset.tasks[0], original.result.sample + i, original.result.step) for i in range(n)]
        jobs = [RolloutJob(j.rollout_id, j.task, j.sample, group or j.group_id, j.step, prefix_calls=len(calls))
                for j in base]
        for job in jobs:
            upstream.expect(job.rollout_id, calls)
        results = session.run(jobs)
        reports = [upstream.report(job.rollout_id) for job in jobs]
    return Replayed(session.run_dir, results, reports)


def replay_relay(exp: Experiment, model_dir: Path | None) -> Callable[[str], ReplayUpstream]:
    """What a rollout session puts between its proxy and the policy server to answer recorded calls: a replay
    upstream, decoding with ``model_dir``'s tokenizer (for the text around a divergence and volatile masks)."""
    from forge_cli.replay.server import ReplayUpstream  # lazy: httpx and the HTTP server, only for a real replay
    from forge_cli.serve.tokenizer import load_decoder

    decode = load_decoder(model_dir) if model_dir is not None and model_dir.is_dir() else None
    volatile = patterns(exp.harness.replay_volatile)
    return lambda url: ReplayUpstream(url, decode, volatile)


def replay(reference: str, until: int | None, overrides: list[str], say: Say) -> dict[str, Any]:
    """Replay ``RUN_DIR/ROLLOUT_ID`` (see the module docstring); the summary, also in the new ``replay.json``."""
    run_dir, rollout_id = split_reference(reference)
    original = find_rollout(run_dir, rollout_id)
    calls = script(original, until)
    say(f"replaying {rollout_id}: its first {len(calls)} of {len(original.calls)} calls from the recording, "
        f"task {original.result.task_id}")
    done = run_continuations(run_dir, original, calls, overrides, say)
    (result,), (report,) = done.results, done.reports
    summary = {"source": source_of(run_dir, original),
               "until": until if until is not None else len(original.calls), "run_dir": str(done.run_dir),
               "rollout_id": result.rollout_id, "status": result.status, "reward": result.reward,
               "calls": result.calls, "error": result.error, **report}
    (done.run_dir / "replay.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def source_of(run_dir: Path, original: RunRollout) -> dict[str, Any]:
    """What a replay or branch started from."""
    return {"run_dir": str(run_dir), "rollout_id": original.result.rollout_id, "calls": len(original.calls),
            "status": original.result.status, "reward": original.result.reward}
