"""Load test of forge's tool server: many rollouts' MCP sessions at once, as a 1,000-rollout run would make them.

    .venv/bin/python benchmarks/tool_server.py [--rollouts 1000] [--concurrency 1,32,256,1000] [--calls 5]
        [--json out.json]

The tool server runs in a child process (its CPU is read from /proc, apart from the load generator's) with
``--rollouts`` rollouts registered, each with the shipped mail task's three tools on forge's builtin per-rollout
mailbox (what a Claw-Eval style task with mock services costs the server, minus the service's own time). For each
concurrency N, N rollouts run what an MCP harness does in parallel, over raw HTTP/1.1 JSON-RPC: ``initialize``,
``notifications/initialized``, ``tools/list``, then ``--calls`` ``tools/call``s, each waiting for its answer. It
prints per N: tool calls per second, the server's CPU per request, latency p50/p99 of one request, and, once:
register and unregister time per rollout, the server's resident memory per registered rollout.

The baseline beside each figure: the same requests against the server's ``/healthz`` (no MCP, no session), i.e.
what the HTTP stack alone costs on this machine. Both run on the same cores: the figures are upper bounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
           "MCP-Protocol-Version": "2025-06-18"}
CLOCK = os.sysconf("SC_CLK_TCK")


def serve(rollouts: int) -> None:
    """Child: a tool server with ``rollouts`` registered; grants on stdout, unregisters when stdin closes."""
    from forge_cli.config.compose import compose
    from forge_cli.envs.source import load_tasks
    from forge_cli.tools.server import ToolServer
    from tests.helpers import EXAMPLE_TASKS

    task = load_tasks(compose([f"env.path={EXAMPLE_TASKS}", "env.task_ids=[mail-reply]"]).experiment.env).tasks[0]
    with ToolServer("127.0.0.1", 0) as server:
        rss0 = rss_kb(os.getpid())
        started = time.perf_counter()
        grants = [server.register(f"r{i}", task.tools, task.tool_state) for i in range(rollouts)]
        register_s = time.perf_counter() - started
        print(json.dumps({"url": server.url, "register_s": register_s, "rss_before_kb": rss0,
                          "rss_after_kb": rss_kb(os.getpid()),
                          "grants": [{"url": g.mcp_url, "key": g.key} for g in grants]}), flush=True)
        sys.stdin.read()
        started = time.perf_counter()
        for i in range(rollouts):
            server.unregister(f"r{i}")
        print(json.dumps({"unregister_s": time.perf_counter() - started}), flush=True)


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK  # utime + stime


def rpc_result(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC message of an answer sent as JSON or as one SSE event."""
    response.raise_for_status()
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        message: dict[str, Any] = json.loads(data[-1])
    else:
        message = response.json()
    if "error" in message:
        raise RuntimeError(f"JSON-RPC error: {message['error']}")
    return message


async def session(client: httpx.AsyncClient, grant: dict[str, str], calls: int, latencies: list[float]) -> int:
    """One rollout's MCP conversation; the number of requests made."""
    headers = {**HEADERS, "Authorization": f"Bearer {grant['key']}"}

    async def post(body: dict[str, Any]) -> httpx.Response:
        started = time.perf_counter()
        response = await client.post(grant["url"], json=body, headers=headers)
        latencies.append(time.perf_counter() - started)
        return response

    init = await post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}})
    rpc_result(init)
    if sid := init.headers.get("mcp-session-id"):
        headers["Mcp-Session-Id"] = sid
    (await post({"jsonrpc": "2.0", "method": "notifications/initialized"})).raise_for_status()
    listed = rpc_result(await post({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
    assert {t["name"] for t in listed["result"]["tools"]} >= {"list_inbox"}, listed
    for n in range(calls):
        answer = rpc_result(await post({"jsonrpc": "2.0", "id": 3 + n, "method": "tools/call",
                                        "params": {"name": "list_inbox", "arguments": {}}}))
        assert not answer["result"].get("isError"), answer
    return 3 + calls


async def healthz(client: httpx.AsyncClient, url: str, requests: int, latencies: list[float]) -> int:
    for _ in range(requests):
        started = time.perf_counter()
        (await client.get(f"{url}/healthz")).raise_for_status()
        latencies.append(time.perf_counter() - started)
    return requests


async def load(pid: int, sessions: list[Any]) -> dict[str, float]:
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=len(sessions), max_keepalive_connections=len(sessions))
    async with httpx.AsyncClient(limits=limits, timeout=120) as client:
        cpu0, started = cpu_s(pid), time.perf_counter()
        counts = await asyncio.gather(*(make(client, latencies) for make in sessions))
        wall, cpu = time.perf_counter() - started, cpu_s(pid) - cpu0
    requests = sum(counts)
    ordered = sorted(latencies)
    return {"requests": requests, "wall_s": round(wall, 2), "requests_per_s": round(requests / wall, 1),
            "server_cpu_ms_per_request": round(1000 * cpu / requests, 3),
            "p50_ms": round(1000 * statistics.median(ordered), 2),
            "p99_ms": round(1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rollouts", type=int, default=1000, help="rollouts registered at once")
    parser.add_argument("--concurrency", default="1,32,256,1000", help="comma-separated rollouts talking at once")
    parser.add_argument("--calls", type=int, default=5, help="tools/call requests per rollout")
    parser.add_argument("--json", default=None, help="also write the figures here")
    parser.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve)
        return 0
    levels = [int(n) for n in args.concurrency.split(",")]
    if any(n < 1 or n > args.rollouts for n in levels) or args.rollouts < 1 or args.calls < 0:
        print(f"error: each concurrency must be 1..--rollouts ({args.rollouts}); --calls >= 0", file=sys.stderr)
        return 2
    child = subprocess.Popen([sys.executable, __file__, "--serve", str(args.rollouts)], cwd=ROOT, text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    try:
        ready = json.loads(child.stdout.readline())
        grants = ready["grants"]
        result: dict[str, Any] = {
            "rollouts": args.rollouts, "calls": args.calls,
            "register_ms_per_rollout": round(1000 * ready["register_s"] / args.rollouts, 2),
            "rss_kb_per_rollout": round((ready["rss_after_kb"] - ready["rss_before_kb"]) / args.rollouts, 1),
            "rss_mb_total": round(ready["rss_after_kb"] / 1024, 1), "levels": {}}
        print(f"tool server: {args.rollouts} rollouts registered, {result['register_ms_per_rollout']} ms each, "
              f"{result['rss_kb_per_rollout']} KB resident each ({result['rss_mb_total']} MB in all)", flush=True)
        print(f"{'rollouts at once':>16} | {'MCP req/s':>9} | {'CPU ms/req':>10} | {'p50 ms':>7} | {'p99 ms':>7} || "
              f"{'/healthz req/s':>14} | {'CPU ms/req':>10} | {'p50 ms':>7}", flush=True)
        for n in levels:
            mcp = asyncio.run(load(child.pid, [
                (lambda c, lat, g=g: session(c, g, args.calls, lat)) for g in grants[:n]]))
            base = asyncio.run(load(child.pid, [
                (lambda c, lat: healthz(c, ready["url"], 3 + args.calls, lat)) for _ in range(n)]))
            result["levels"][n] = {"mcp": mcp, "healthz": base}
            print(f"{n:>16} | {mcp['requests_per_s']:>9} | {mcp['server_cpu_ms_per_request']:>10} | "
                  f"{mcp['p50_ms']:>7} | {mcp['p99_ms']:>7} || {base['requests_per_s']:>14} | "
                  f"{base['server_cpu_ms_per_request']:>10} | {base['p50_ms']:>7}", flush=True)
        child.stdin.close()
        done = json.loads(child.stdout.readline())
        result["unregister_ms_per_rollout"] = round(1000 * done["unregister_s"] / args.rollouts, 2)
        print(f"unregister: {result['unregister_ms_per_rollout']} ms per rollout", flush=True)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
