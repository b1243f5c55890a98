"""Load test of forge's Kubernetes backend: N concurrent sandboxes against the recorded fake API server.

    .venv/bin/python benchmarks/k8s_load.py [--sandboxes 1000] [--commands 3] [--command-s 2]
        [--api-latency-ms 5] [--max-api-concurrency 16] [--json out.json]

Each sandbox is what a rollout does with the real client's call sequence (``forge_cli/runtime/kubernetes.py``):
create its NetworkPolicy and Pod, wait for Running, run ``--commands`` commands that each take ``--command-s`` in
the "container", then delete both. The fake (``tests/runtime/kube_fake.py``) answers every API call after
``--api-latency-ms`` (a loaded API server's latency; set it to what your cluster shows) and counts the calls. What
it prints is forge's own cost, not the cluster's:

- per-command overhead: wall time of ``sandbox.exec`` minus the command's own time (client-side queueing, the
  API gate's semaphore, thread hand-offs, retries), p50/p90/p99/max;
- sandbox start and stop times; total wall time next to the ideal (every sandbox alone);
- API calls per rollout by kind, and the most in flight at once (bounded by ``runtime.max_api_concurrency``).

No cluster is needed or contacted; docs/scale.md gives the figures for 1,000 sandboxes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from forge_cli.config.schema import KubernetesRuntime  # noqa: E402
from forge_cli.runtime import kubernetes as kube  # noqa: E402
from forge_cli.runtime.spec import SandboxSpec  # noqa: E402
from tests.runtime.kube_fake import FakeCluster  # noqa: E402


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


async def _one(index: int, runtime: KubernetesRuntime, commands: int, command_s: float,
               overheads: list[float], starts: list[float], stops: list[float]) -> None:
    spec = SandboxSpec(run_id="load", rollout_id=f"r{index}", image="forge-base:bookworm", workdir="/work",
                       timeout_s=3600)
    began = time.perf_counter()
    sandbox = await kube.KubernetesSandbox.create(spec, runtime)
    starts.append(time.perf_counter() - began)
    try:
        for _ in range(commands):
            t0 = time.perf_counter()
            result = await sandbox.exec(["work"], timeout=command_s * 10 + 60)
            overheads.append(time.perf_counter() - t0 - command_s)
            assert result.exit_code == 0, result
    finally:
        t0 = time.perf_counter()
        await sandbox.stop()
        stops.append(time.perf_counter() - t0)


async def _all(n: int, runtime: KubernetesRuntime, commands: int, command_s: float) -> dict[str, list[float]]:
    overheads: list[float] = []
    starts: list[float] = []
    stops: list[float] = []
    await asyncio.gather(*[_one(i, runtime, commands, command_s, overheads, starts, stops) for i in range(n)])
    return {"overheads": overheads, "starts": starts, "stops": stops}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sandboxes", type=int, default=1000)
    ap.add_argument("--commands", type=int, default=3)
    ap.add_argument("--command-s", type=float, default=2.0)
    ap.add_argument("--api-latency-ms", type=float, default=5.0)
    ap.add_argument("--max-api-concurrency", type=int, default=16)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.sandboxes < 1 or args.commands < 1 or args.command_s < 0 or args.api_latency_ms < 0:
        ap.error("--sandboxes and --commands must be >= 1, --command-s and --api-latency-ms >= 0")

    cluster = FakeCluster()
    cluster.delay_s = args.api_latency_ms / 1000
    cluster.phases = ["Running"]

    def container(pod: str, argv: list[str]) -> tuple[bytes, bytes, int] | None:
        if argv == ["work"]:
            time.sleep(args.command_s)
            return b"", b"", 0
        return None

    cluster.on_command = container
    kube.api_factory = cluster
    kube.KubernetesSandbox.POLL_S = 0.05
    runtime = KubernetesRuntime(kind="kubernetes", description="load test",
                                max_api_concurrency=args.max_api_concurrency)
    began = time.perf_counter()
    got = asyncio.run(_all(args.sandboxes, runtime, args.commands, args.command_s))
    wall = time.perf_counter() - began
    calls = Counter(c[0] if c[0] != "exec" else f"exec {c[1] if c[1] in ('write', 'read') else 'command'}"
                    for c in cluster.calls)
    per_rollout = {k: v / args.sandboxes for k, v in sorted(calls.items())}
    ov = [o * 1000 for o in got["overheads"]]
    ideal = statistics.median(got["starts"]) + args.commands * args.command_s + statistics.median(got["stops"])
    summary: dict[str, Any] = {
        "sandboxes": args.sandboxes, "commands_per_sandbox": args.commands, "command_s": args.command_s,
        "api_latency_ms": args.api_latency_ms, "max_api_concurrency": args.max_api_concurrency,
        "command_overhead_ms": {"p50": _pct(ov, 0.5), "p90": _pct(ov, 0.9), "p99": _pct(ov, 0.99), "max": max(ov)},
        "start_s": {"p50": _pct(got["starts"], 0.5), "max": max(got["starts"])},
        "stop_s": {"p50": _pct(got["stops"], 0.5), "max": max(got["stops"])},
        "wall_s": wall, "ideal_s": ideal, "api_calls_per_rollout": per_rollout,
        "api_calls_per_rollout_total": sum(per_rollout.values()), "max_api_in_flight": cluster.max_in_flight,
    }
    print(f"{args.sandboxes} sandboxes x {args.commands} commands of {args.command_s} s, API latency "
          f"{args.api_latency_ms} ms, at most {args.max_api_concurrency} API calls in flight")
    print(f"  per-command overhead (forge's own): p50 {_pct(ov, 0.5):.1f} ms  p90 {_pct(ov, 0.9):.1f} ms  "
          f"p99 {_pct(ov, 0.99):.1f} ms  max {max(ov):.1f} ms")
    print(f"  sandbox start p50 {_pct(got['starts'], 0.5):.2f} s (max {max(got['starts']):.2f}), stop p50 "
          f"{_pct(got['stops'], 0.5):.2f} s (max {max(got['stops']):.2f})")
    print(f"  wall {wall:.1f} s for all, baseline {ideal:.1f} s (one sandbox's start + commands + stop)")
    print(f"  API calls per rollout: {summary['api_calls_per_rollout_total']:.1f} "
          + ", ".join(f"{k} {v:.1f}" for k, v in per_rollout.items()))
    print(f"  most API calls in flight at once: {cluster.max_in_flight}")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
