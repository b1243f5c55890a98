"""Capture proxy benchmark: direct vs bare reverse mitmdump vs forge's proxy with capture on.

    .venv/bin/python benchmarks/proxy.py [--requests 3000,8000,9000] [--conns 1,16,64] [--json out.json]
    .venv/bin/python benchmarks/proxy.py --conns 1,16 --requests 3000,8000 --runs 3 [--before b1.json,b2.json,b3.json]

50 KB Chat Completions request bodies, non-streamed, against a fast local upstream (the fake vLLM in
tests/proxy/fake_upstream.py, run as its own process). The client is one asyncio process with raw
HTTP/1.1 keep-alive connections. Prints throughput and latency percentiles per setup and concurrency,
the ratios the targets are about (forge >= 95% of bare mitmdump at 16 connections, <= 1.5 ms added p50
over direct at 1 connection), CPU per request of mitmdump (bare vs with forge's addon) and of forge's
store writer process (robust to a busy machine, unlike req/s), and checks that every answered forge
call is in the store. ``--runs N`` repeats the whole comparison and prints the medians; ``--before`` takes the
``--json`` files of runs made before a change (e.g. from a ``git worktree`` of the older commit) and prints their
medians beside (issue 14: forge/mitmdump at 16 connections, and the addon's added p50 at 1 connection not more
than 0.2 ms above before).

``--replicas N`` measures forge's proxy as N replicas instead (``proxy.replicas``): the connections spread evenly
over them, per-replica throughput and CPU per call (proxy loop + store writer) and the total; on a machine with
cores to spare the total grows with N, on this 2-core machine it cannot (docs/scale.md derives replica counts from
the per-call CPU). The temporary stores are removed at the end either way.

A fourth setup, ``core``, is forge's own proxy process without forge's addon (``forge_cli.proxy.main
--core-only``: mitmproxy's proxy core with the few addons forge loads instead of mitmdump's ~35): forge
minus core is what the addon itself costs; core minus direct is what mitmproxy's core costs here.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from forge_cli.proxy.launcher import free_port, mitmdump_path, start_proxy  # noqa: E402
from tests.proxy.conftest import _wait_port  # noqa: E402

BODY = json.dumps({"model": "m", "max_tokens": 16,
                   "messages": [{"role": "system", "content": "You are a coding agent. " * 40},
                                {"role": "user", "content": ("lorem ipsum dolor sit amet " * 1900)[:49000]}]}).encode()


def _cpu_s(pid: int) -> float:
    """User+system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    lower = head.lower()
    if b"content-length:" in lower:
        length = int(lower.split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
        await reader.readexactly(length)
    else:
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    return status


async def _worker(port: int, path: str, key: str, n: int, lat: list[float], bad: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
            f"authorization: Bearer {key}\r\ncontent-length: {len(BODY)}\r\n\r\n").encode()
    request = head + BODY
    for _ in range(n):
        start = time.perf_counter()
        writer.write(request)
        status = await _read_response(reader)
        lat.append(time.perf_counter() - start)
        if status != 200:
            bad.append(status)
    writer.close()


async def _run(port: int, path: str, key: str, conns: int, total: int) -> dict[str, Any]:
    lat: list[float] = []
    bad: list[int] = []
    per = [total // conns + (1 if i < total % conns else 0) for i in range(conns)]
    start = time.perf_counter()
    await asyncio.gather(*(_worker(port, path, key, n, lat, bad) for n in per if n))
    wall = time.perf_counter() - start
    lat.sort()

    def pct(p: float) -> float:
        return lat[min(len(lat) - 1, int(p * len(lat)))] * 1000

    return {"conns": conns, "requests": len(lat), "errors": len(bad), "rps": len(lat) / wall,
            "p50_ms": pct(0.5), "p90_ms": pct(0.9), "p99_ms": pct(0.99), "mean_ms": statistics.fmean(lat) * 1000}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conns", default="1,16,64")
    ap.add_argument("--requests", default="3000,8000,9000", help="requests per run, one per concurrency")
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--json", type=Path, help="write the results here (with --runs: one file per run, -N added)")
    ap.add_argument("--runs", type=int, default=1, help="repeat the comparison N times and print the medians")
    ap.add_argument("--before", default="", help="comma-separated --json files of runs before a change: their "
                                                 "medians are printed beside")
    ap.add_argument("--replicas", type=int, default=None, help="measure N forge proxy replicas instead (N >= 1)")
    args = ap.parse_args()
    conns = [int(c) for c in args.conns.split(",")]
    totals = [int(n) for n in args.requests.split(",")]
    if len(totals) == 1:
        totals *= len(conns)
    if args.replicas is not None and args.replicas < 1:
        ap.error("--replicas must be 1 or more")
    if args.runs < 1:
        ap.error("--runs must be 1 or more")
    before = [json.loads(Path(f).read_text()) for f in args.before.split(",") if f]
    summaries: list[dict[str, Any]] = []
    for run in range(args.runs):
        tmp = Path(tempfile.mkdtemp(prefix="forge-proxy-bench-"))
        try:
            if args.replicas:
                return _replicas(args.replicas, conns, totals, args.warmup, tmp, args.json)
            if args.runs > 1:
                print(f"\n== run {run + 1} of {args.runs}", flush=True)
            out = args.json.with_name(f"{args.json.stem}-{run + 1}{args.json.suffix}") if args.json and args.runs > 1 \
                else args.json
            summaries.append(_compare(args, conns, totals, tmp, out))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)  # the store of a long run is hundreds of MB
    if args.runs > 1 or before:
        _medians(summaries, before)
    return 0 if all(s["lost"] == 0 for s in summaries) else 1


def _medians(after: list[dict[str, Any]], before: list[dict[str, Any]]) -> None:
    """The medians over runs of the figures issue 14 is about, before and after."""
    def med(runs: list[dict[str, Any]], conns: int, key: str) -> float | None:
        values = [r[f"conns_{conns}"][key] for r in runs if f"conns_{conns}" in r]
        return statistics.median(values) if values else None

    rows = [("forge/mitmdump throughput, 16 conns", 16, "forge_over_mitmdump_rps", "{:.1%}"),
            ("the addon's added p50 over the core, 1 conn (ms)", 1, "addon_added_p50_ms_vs_core", "{:.2f}"),
            ("forge's added p50 over direct, 1 conn (ms)", 1, "added_p50_ms_vs_direct", "{:.2f}"),
            ("addon CPU on the proxy's loop, 16 conns (us/call)", 16, "addon_cpu_us_per_call", "{:.0f}"),
            ("store writer CPU, 16 conns (us/call)", 16, "writer_cpu_us_per_call", "{:.0f}")]
    print(f"\nmedians of {len(after)} run(s)" + (f", before: {len(before)} run(s)" if before else ""))
    for label, conns, key, fmt in rows:
        a, b = med(after, conns, key), med(before, conns, key)
        line = f"  {label:<52} {fmt.format(a) if a is not None else '-':>8}"
        if before:
            line += f"   before {fmt.format(b) if b is not None else '-':>8}"
        print(line)
    ratio = med(after, 16, "forge_over_mitmdump_rps")
    added, added_before = med(after, 1, "addon_added_p50_ms_vs_core"), med(before, 1, "addon_added_p50_ms_vs_core")
    print(f"targets (medians): forge >= 95% of mitmdump at 16 conns: {'met' if ratio and ratio >= 0.95 else 'NOT met'}"
          + (f"; the addon's added p50 at 1 conn at most 0.2 ms above before: "
             f"{'met' if added is not None and added_before is not None and added <= added_before + 0.2 else 'NOT met'}"
             if before else ""))


async def _spread(targets: list[tuple[int, str, str]], conns: int, total: int) -> list[dict[str, Any]]:
    """The connections and requests split evenly over ``targets``, all at once."""
    share = max(1, conns // len(targets))
    return list(await asyncio.gather(*[_run(port, path, key, share, total // len(targets))
                                       for port, path, key in targets]))


def _replicas(n: int, conns: list[int], totals: list[int], warmup: int, tmp: Path, out: Path | None) -> int:
    up_port = free_port()
    upstream = subprocess.Popen([sys.executable, str(ROOT / "tests/proxy/fake_upstream.py"), str(up_port)])
    proxies = []
    summary: dict[str, Any] = {"replicas": n, "runs": []}
    try:
        _wait_port(up_port)
        proxies = [start_proxy(f"http://127.0.0.1:{up_port}", store=tmp / f"replica-{i}.sqlite", max_output_tokens=0)
                   for i in range(n)]
        rollouts = [p.register(task="benchmark") for p in proxies]
        targets = [(int(p.url.rsplit(":", 1)[1]), f"/r/{r['rollout_id']}/v1/chat/completions", r["key"])
                   for p, r in zip(proxies, rollouts, strict=True)]
        asyncio.run(_spread(targets, 4 * n, warmup * n))
        answered = warmup * n
        pids = [[p.process.pid, *_children(p.process.pid)] for p in proxies]
        for n_conns, total in zip(conns, totals, strict=True):
            before = [sum(_cpu_s(q) for q in group) for group in pids]
            started = time.perf_counter()
            runs = asyncio.run(_spread(targets, n_conns, total))
            wall = time.perf_counter() - started
            cpu = [(sum(_cpu_s(q) for q in group) - b) / max(1, r["requests"]) * 1e6
                   for group, b, r in zip(pids, before, runs, strict=True)]
            done = sum(r["requests"] - r["errors"] for r in runs)
            answered += done
            for i, (r, c) in enumerate(zip(runs, cpu, strict=True)):
                print(f"replica {i}  conns={max(1, n_conns // n):<3} {r['rps']:8.0f} req/s  p50 {r['p50_ms']:6.2f} ms  "
                      f"cpu/call {c:5.0f} us (proxy + writer)  errors {r['errors']}", flush=True)
            print(f"total     conns={n_conns:<3} {done / wall:8.0f} req/s over {n} replica(s)", flush=True)
            summary["runs"].append({"conns": n_conns, "total_rps": done / wall, "replicas": runs,
                                    "cpu_us_per_call": cpu})
        stored = 0
        for p, r in zip(proxies, rollouts, strict=True):
            p.finish(r["rollout_id"])
            with contextlib.closing(sqlite3.connect(p.store)) as conn:
                stored += conn.execute("SELECT COUNT(*) FROM calls WHERE status = 'ok'").fetchone()[0]
    finally:
        for p in proxies:
            p.stop()
        upstream.terminate()
    summary.update({"answered": answered, "stored": stored, "lost": answered - stored})
    print(f"records: {answered} answered, {stored} stored, lost {answered - stored}")
    if out:
        out.write_text(json.dumps(summary, indent=2))
    return 0 if answered == stored else 1


def _compare(args: argparse.Namespace, conns: list[int], totals: list[int], tmp: Path,
             out: Path | None) -> dict[str, Any]:
    up_port, bare_port, core_port = free_port(), free_port(), free_port()
    upstream = subprocess.Popen([sys.executable, str(ROOT / "tests/proxy/fake_upstream.py"), str(up_port)])
    bare = subprocess.Popen([str(mitmdump_path()), "--mode", f"reverse:http://127.0.0.1:{up_port}@127.0.0.1:{bare_port}",
                             "--set", "connection_strategy=lazy", "--set", "flow_detail=0",
                             "--set", "termlog_verbosity=warn"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    core = subprocess.Popen([str(mitmdump_path().with_name("python")), "-m", "forge_cli.proxy.main", "--core-only",
                             "--mode", f"reverse:http://127.0.0.1:{up_port}@127.0.0.1:{core_port}",
                             "--set", "connection_strategy=lazy", "--set", "termlog_verbosity=warn"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    forge = start_proxy(f"http://127.0.0.1:{up_port}", store=tmp / "traces.sqlite", max_output_tokens=0)
    results: dict[str, list[dict[str, Any]]] = {"direct": [], "mitmdump": [], "core": [], "forge": []}
    answered = 0
    try:
        _wait_port(up_port)
        _wait_port(bare_port)
        _wait_port(core_port)
        rollout = forge.register(task="benchmark")
        forge_port = int(forge.url.rsplit(":", 1)[1])
        setups = {"direct": (up_port, "/v1/chat/completions", "x"),
                  "mitmdump": (bare_port, "/v1/chat/completions", "x"),
                  "core": (core_port, "/v1/chat/completions", "x"),
                  "forge": (forge_port, f"/r/{rollout['rollout_id']}/v1/chat/completions", rollout["key"])}
        for port, path, key in setups.values():  # warm up connections, caches, the writer
            asyncio.run(_run(port, path, key, 4, args.warmup))
        answered += args.warmup
        procs = {"direct": [upstream.pid], "mitmdump": [bare.pid], "core": [core.pid], "forge": [forge.process.pid]}
        writer = _children(forge.process.pid)
        for n_conns, total in zip(conns, totals, strict=True):
            for name, (port, path, key) in setups.items():
                before = [_cpu_s(p) for p in procs[name]]
                before_writer = sum(_cpu_s(p) for p in writer) if name == "forge" else 0.0
                res = asyncio.run(_run(port, path, key, n_conns, total))
                # CPU per request of the process in front of the upstream (the upstream itself for direct)
                res["proxy_cpu_us"] = sum(_cpu_s(p) - b for p, b in zip(procs[name], before, strict=True)) \
                    / res["requests"] * 1e6
                if name == "forge":
                    res["writer_cpu_us"] = (sum(_cpu_s(p) for p in writer) - before_writer) / res["requests"] * 1e6
                results[name].append(res)
                if name == "forge":
                    answered += res["requests"] - res["errors"]
                cpu = f"cpu/req {res['proxy_cpu_us']:5.0f} us" + (
                    f" + writer {res['writer_cpu_us']:4.0f} us" if "writer_cpu_us" in res else "")
                print(f"{name:<9} conns={n_conns:<3} {res['rps']:8.0f} req/s  p50 {res['p50_ms']:6.2f} ms  "
                      f"p90 {res['p90_ms']:6.2f} ms  p99 {res['p99_ms']:6.2f} ms  errors {res['errors']}  {cpu}",
                      flush=True)
        forge.finish(rollout["rollout_id"])  # waits until the writer committed everything sent
        conn = sqlite3.connect(tmp / "traces.sqlite")
        stored = conn.execute("SELECT COUNT(*) FROM calls WHERE rollout_id = ? AND status = 'ok'",
                              (rollout["rollout_id"],)).fetchone()[0]
        with_ids = conn.execute("SELECT COUNT(*) FROM calls WHERE rollout_id = ? AND completion_tokens > 0",
                                (rollout["rollout_id"],)).fetchone()[0]
    finally:
        forge.stop()
        bare.terminate()
        core.terminate()
        upstream.terminate()
    print("\nratios")
    summary: dict[str, Any] = {"results": results}
    for i, n_conns in enumerate(conns):
        f, b, c, d = results["forge"][i], results["mitmdump"][i], results["core"][i], results["direct"][i]
        ratio = f["rps"] / b["rps"]
        added = f["p50_ms"] - d["p50_ms"]
        summary[f"conns_{n_conns}"] = {"forge_over_mitmdump_rps": ratio, "added_p50_ms_vs_direct": added,
                                       "mitmdump_added_p50_ms_vs_direct": b["p50_ms"] - d["p50_ms"],
                                       "core_added_p50_ms_vs_direct": c["p50_ms"] - d["p50_ms"],
                                       "forge_over_core_rps": f["rps"] / c["rps"],
                                       "addon_added_p50_ms_vs_core": f["p50_ms"] - c["p50_ms"],
                                       "addon_cpu_us_per_call": f["proxy_cpu_us"] - c["proxy_cpu_us"],
                                       "writer_cpu_us_per_call": f["writer_cpu_us"]}
        print(f"  conns={n_conns:<3} forge/mitmdump throughput {ratio:6.1%}   forge added p50 vs direct "
              f"{added:5.2f} ms (bare mitmdump adds {b['p50_ms'] - d['p50_ms']:5.2f} ms, the core alone "
              f"{c['p50_ms'] - d['p50_ms']:5.2f} ms)")
        print(f"            forge/core throughput {f['rps'] / c['rps']:6.1%}   the addon adds p50 "
              f"{f['p50_ms'] - c['p50_ms']:5.2f} ms, CPU {f['proxy_cpu_us'] - c['proxy_cpu_us']:.0f} us/call on the "
              f"proxy's loop + writer {f['writer_cpu_us']:.0f} us/call in its own process")
    lost = answered - stored
    summary.update({"answered": answered, "stored": stored, "stored_with_token_ids": with_ids, "lost": lost})
    print(f"  records: {answered} answered, {stored} stored ok ({with_ids} with token ids), lost {lost}")
    t16 = summary.get("conns_16", {}).get("forge_over_mitmdump_rps")
    t1 = summary.get("conns_1", {}).get("added_p50_ms_vs_direct")
    print(f"\ntargets: forge >= 95% of mitmdump at 16 conns: {'met' if t16 and t16 >= 0.95 else 'NOT met'}; "
          f"<= 1.5 ms added p50 at 1 conn: {'met' if t1 is not None and t1 <= 1.5 else 'NOT met'}; "
          f"zero lost records: {'met' if lost == 0 else 'NOT met'}")
    if out:
        out.write_text(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    raise SystemExit(main())
