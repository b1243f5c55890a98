"""Sandbox lifecycle benchmark: create → exec → destroy, per backend, at several concurrencies.

    .venv/bin/python benchmarks/sandbox.py                    # local, docker and raw `docker run`; c = 1, 8, 32
    .venv/bin/python benchmarks/sandbox.py --backends docker raw --concurrency 8 --per-level 2

For each backend and concurrency c, ``c * per_level`` sandboxes are run (at least ``--min-runs``), c at a
time, in ``--rounds`` rounds that alternate between the backends (the machine's load hits all alike);
each one is created from forge-base:bookworm, runs ``sh -c 'echo ready'`` and is destroyed. Reported:
median and p95 latency of one lifecycle, sandboxes per minute, and the ratio of each to the raw
``docker run --rm`` loop (the floor: the docker CLI creating the same container, with forge's labels, limits,
cap-drop and init, running the command as its main process, and removing it). Where the time goes: CPU seconds
per lifecycle of the client (forge's process, or the `docker` CLI processes of the raw loop) and of the whole
machine (/proc/stat: the daemon, containerd, runc and the kernel included).
Target: forge's docker backend within 1.3x of raw `docker run` latency.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shlex
import statistics
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from forge_cli.runtime.docker_spec import docker_run_command
from forge_cli.runtime.registry import backend
from forge_cli.runtime.spec import SandboxSpec

IMAGE = "forge-base:bookworm"
COMMAND = ["sh", "-c", "echo ready"]


@dataclass
class Row:
    backend: str
    concurrency: int
    runs: int
    median_ms: float
    p95_ms: float
    per_minute: float
    client_cpu_ms: float = 0.0  # per lifecycle: forge's process, or the raw loop's docker CLI processes
    machine_cpu_ms: float = 0.0  # per lifecycle: every process and the kernel


def machine_cpu_s() -> float:
    """Busy CPU seconds of the whole machine so far (user, nice, system, irq, softirq)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
    return (fields[0] + fields[1] + fields[2] + fields[5] + fields[6]) / os.sysconf("SC_CLK_TCK")


def client_cpu_s(kind: str) -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN if kind == "raw" else resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def forge_once(kind: str, run_id: str, index: int) -> float:
    spec = SandboxSpec(run_id=run_id, rollout_id=f"{run_id}-{index}", image=IMAGE, workdir="/work", timeout_s=300)
    started = time.perf_counter()
    sandbox = await backend(kind).create(spec)
    try:
        result = await sandbox.exec(COMMAND)
        assert result.stdout == "ready\n", result
    finally:
        await sandbox.stop()
    return time.perf_counter() - started


def raw_argv(spec: SandboxSpec) -> list[str]:
    """``docker run --rm`` of the same container forge creates (labels, limits, cap-drop, init), running COMMAND
    as its main process: what is left is the daemon's own work, the floor forge is measured against."""
    argv = shlex.split(docker_run_command(spec))
    argv[argv.index("-d")] = "--rm"
    return argv[: argv.index(IMAGE) + 1] + COMMAND


async def raw_once(run_id: str, index: int) -> float:
    spec = SandboxSpec(run_id=run_id, rollout_id=f"{run_id}-{index}", image=IMAGE, workdir="/work", timeout_s=300)
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *raw_argv(spec), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode == 0 and out == b"ready\n", err
    return time.perf_counter() - started


async def batch(kind: str, concurrency: int, runs: int) -> tuple[list[float], float, float, float]:
    """``runs`` lifecycles, ``concurrency`` at a time: their latencies, the wall time of the batch and the CPU
    seconds the client and the machine spent on it."""
    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    gate = asyncio.Semaphore(concurrency)

    async def one(index: int) -> float:
        async with gate:
            return await (raw_once(run_id, index) if kind == "raw" else forge_once(kind, run_id, index))

    started, client0, machine0 = time.perf_counter(), client_cpu_s(kind), machine_cpu_s()
    latencies = await asyncio.gather(*(one(i) for i in range(runs)))
    return (list(latencies), time.perf_counter() - started, client_cpu_s(kind) - client0,
            machine_cpu_s() - machine0)


def row(kind: str, concurrency: int, latencies: list[float], wall: float, client: float, machine: float) -> Row:
    ordered = sorted(latencies)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return Row(kind, concurrency, len(ordered), statistics.median(ordered) * 1000, p95 * 1000,
               len(ordered) / wall * 60, client / len(ordered) * 1000, machine / len(ordered) * 1000)


async def level(kinds: list[str], concurrency: int, runs: int, rounds: int) -> list[Row]:
    """Every backend at one concurrency, in alternating rounds so that load from elsewhere hits all alike."""
    latencies: dict[str, list[float]] = {k: [] for k in kinds}
    walls, clients, machines = dict.fromkeys(kinds, 0.0), dict.fromkeys(kinds, 0.0), dict.fromkeys(kinds, 0.0)
    per_round = max(concurrency, runs // rounds)
    for _ in range(rounds):
        for kind in kinds:
            got, wall, client, machine = await batch(kind, concurrency, per_round)
            latencies[kind] += got
            walls[kind] += wall
            clients[kind] += client
            machines[kind] += machine
    return [row(kind, concurrency, latencies[kind], walls[kind], clients[kind], machines[kind]) for kind in kinds]


async def warm_up(kinds: list[str]) -> None:
    for kind in kinds:
        await batch(kind, 1, 2)


def table(rows: list[Row]) -> str:
    raw = {r.concurrency: r for r in rows if r.backend == "raw"}
    lines = [f"{'backend':<8} {'c':>3} {'runs':>5} {'median ms':>10} {'p95 ms':>9} {'per min':>8} "
             f"{'median/raw':>11} {'p95/raw':>8} {'rate/raw':>9} {'client CPU ms':>14} {'machine CPU ms':>15}"]
    for r in rows:
        base = raw.get(r.concurrency)
        ratios = ("", "", "") if base is None or r.backend == "raw" else (
            f"{r.median_ms / base.median_ms:.2f}x", f"{r.p95_ms / base.p95_ms:.2f}x",
            f"{r.per_minute / base.per_minute:.2f}x")
        lines.append(f"{r.backend:<8} {r.concurrency:>3} {r.runs:>5} {r.median_ms:>10.0f} {r.p95_ms:>9.0f} "
                     f"{r.per_minute:>8.0f} {ratios[0]:>11} {ratios[1]:>8} {ratios[2]:>9} {r.client_cpu_ms:>14.0f} "
                     f"{r.machine_cpu_ms:>15.0f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", nargs="+", default=["raw", "docker", "local"],
                        choices=["raw", "docker", "local"])
    parser.add_argument("--concurrency", nargs="+", type=int, default=[1, 8, 32])
    parser.add_argument("--per-level", type=int, default=2, help="sandboxes per unit of concurrency")
    parser.add_argument("--min-runs", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per concurrency level")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON to this file")
    args = parser.parse_args()

    async def everything() -> list[Row]:
        await warm_up(args.backends)
        rows = []
        for c in args.concurrency:
            for r in await level(args.backends, c, max(args.min_runs, c * args.per_level), args.rounds):
                print(f"  {r.backend} c={c}: median {r.median_ms:.0f} ms, {r.per_minute:.0f}/min", file=sys.stderr)
                rows.append(r)
        return rows

    started = time.perf_counter()
    rows = asyncio.run(everything())
    print(table(rows))
    print(f"(total {time.perf_counter() - started:.0f} s; target: docker median within 1.3x of raw `docker run`)")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2))


if __name__ == "__main__":
    main()
