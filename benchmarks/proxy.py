"""Capture proxy benchmark: forge's proxy beside its own core, bare mitmdump and rLLM's model gateway.

    .venv/bin/python benchmarks/proxy.py [--conns 1,16,64] [--requests 1500,3000,3000] [--runs 3] [--json out.json]
    .venv/bin/python benchmarks/proxy.py --setups direct,core,forge --runs 5 --seed 7
    .venv/bin/python benchmarks/proxy.py --runs 3 --json after.json --before before.json   # beside an older commit
    .venv/bin/python benchmarks/proxy.py --replicas 3   # forge's proxy as N replicas (docs/scale.md)

Five setups, each in its own process(es), all in front of the same fake vLLM (``tests/proxy/fake_upstream.py``, its
own process, answering in vLLM 0.32's exact shape):

- ``direct``: the client talks to the fake vLLM itself;
- ``mitmdump``: bare reverse mitmdump (its ~35 default addons, no script);
- ``core``: forge's proxy process without forge's addon (``forge_cli.remote.mitmproxy.main --core-only``: mitmproxy's
  core with the few addons forge loads): forge / core is what the addon costs, capture and store included;
- ``forge``: forge's capture proxy (``start_proxy``) with its SQLite store (WAL, a writer process);
- ``rllm``: rLLM's model gateway, the nearest peer (PyPI ``rllm-model-gateway`` 0.1.0, FastAPI + httpx +
  aiosqlite), started as its README says (``rllm-model-gateway --worker http://UPSTREAM/v1 --db-path ...``, here
  with ``--host 127.0.0.1 --log-level warning``: no per-request access log, as mitmdump and forge run at "warn")
  from its own virtual environment, ``$FORGE_HOME/envs/rllm-gateway``, which this benchmark creates on first use
  with pip (never a dependency of forge; ``--rllm-env`` puts it elsewhere); agents call
  ``/sessions/<id>/v1/chat/completions``.

Every request is the same non-streamed Chat Completions call with a 50 KB prompt, ``max_tokens`` and ``min_tokens``
``--completion-tokens`` (128): where capture is on (forge, rLLM: both add ``return_token_ids`` and ``logprobs``),
the fake answers with ~12.5k prompt token ids (one per 4 bytes of prompt text, as a tokenizer on English) and one
``logprobs.content`` entry per completion token (~83 KB of JSON) that the proxy parses, stores and strips before the
client sees the answer; the other setups get the plain ~1 KB answer. The client is one asyncio process with raw
HTTP/1.1 keep-alive connections.

``--runs`` rounds (default 3). Each round starts every setup afresh (new stores), warms each up, then at each
connection count runs the setups one after another in a random order (``random.Random(--seed)``, printed and kept
in the JSON), so drift on a busy machine falls on no setup in particular. After each measured run a storing setup
is settled: forge's rollout is finished (the control API answers once all its records are committed), rLLM's
store is polled until its session holds every answered call; the time that takes is ``drain_s`` and every
record is checked (stored, with all prompt ids, completion ids and logprobs). Throughput counts answered calls
over the client's wall time; ``sustained`` adds the drain. CPU per call is read from /proc over the run and the
drain: of the process answering (for forge: its proxy loop, and its store writer apart), and of the fake vLLM.

The figures are medians over rounds; each ratio (gate) is computed within a round and its median reported:
forge / core (the addon's cost), forge / rLLM and forge / mitmdump throughput at each connection count, the
p50 latency each proxy adds over direct, and the records: answered, stored, token-exact, lost. Old targets still
printed: forge >= 95% of bare mitmdump at 16 connections, <= 1.5 ms added p50 over direct at 1 connection, no
lost record. ``--json`` writes the configuration, versions, every round (orders, per-setup results, ratios) and the
medians. ``--before`` takes ``--json`` files of an older commit's runs (this format, or the older one file per run)
and prints their medians beside.

``--replicas N`` measures forge's proxy as N replicas instead (``proxy.replicas``): the connections spread evenly
over them, per-replica throughput and CPU per call (proxy loop + store writer) and the total; on a machine with
cores to spare the total grows with N, on this 2-core machine it cannot (docs/scale.md derives replica counts from
the per-call CPU). The temporary stores are removed at the end either way.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

from _proxy_setups import (  # noqa: E402
    Plain,
    children,
    cpu_s,
    load,
    rllm_gateway,
    spread,
    start_setups,
    start_upstream,
    stop_all,
)

from forge_cli.proxy.launcher import start_proxy  # noqa: E402
from tests.proxy import fake_upstream as fake  # noqa: E402

SETUPS = ("direct", "mitmdump", "core", "forge", "rllm")
MAX_MODEL_LEN = 32768  # the fake vLLM's served context: room for the 50 KB prompt's ~12.5k ids


def body(completion_tokens: int) -> dict[str, Any]:
    return {"model": "m", "max_tokens": completion_tokens, "min_tokens": completion_tokens,
            "messages": [{"role": "system", "content": "You are a coding agent. " * 40},
                         {"role": "user", "content": ("lorem ipsum dolor sit amet " * 1900)[:49000]}]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conns", default="1,16,64")
    ap.add_argument("--requests", default="1500,3000,3000", help="requests per measured run, one per concurrency")
    ap.add_argument("--warmup", type=int, default=200, help="requests per setup before each round's runs")
    ap.add_argument("--runs", type=int, default=3, help="rounds; the figures are medians over them")
    ap.add_argument("--seed", type=int, default=0, help="seed of the setups' random order in each round")
    ap.add_argument("--setups", default=",".join(SETUPS), help="comma-separated, from " + ",".join(SETUPS))
    ap.add_argument("--completion-tokens", type=int, default=128, help="tokens the fake vLLM generates per call")
    ap.add_argument("--rllm-env", type=Path, default=None, help="rLLM's gateway's virtual environment "
                                                                "(default $FORGE_HOME/envs/rllm-gateway)")
    ap.add_argument("--json", type=Path, help="write the configuration, every round and the medians here")
    ap.add_argument("--before", default="", help="comma-separated --json files of runs before a change: their "
                                                 "medians are printed beside")
    ap.add_argument("--replicas", type=int, default=None, help="measure N forge proxy replicas instead (N >= 1)")
    args = ap.parse_args()
    conns = [int(c) for c in args.conns.split(",")]
    totals = [int(n) for n in args.requests.split(",")]
    totals = totals * len(conns) if len(totals) == 1 else totals
    names = [s for s in args.setups.split(",") if s]
    if len(totals) != len(conns):
        ap.error("--requests: one count, or one per --conns")
    if args.replicas is not None and args.replicas < 1:
        ap.error("--replicas must be 1 or more")
    if args.runs < 1:
        ap.error("--runs must be 1 or more")
    if not names or any(n not in SETUPS for n in names) or len(set(names)) != len(names):
        ap.error(f"--setups: some of {','.join(SETUPS)}, each once")
    request = body(args.completion_tokens)
    if args.replicas:
        return _replicas(args.replicas, conns, totals, args.warmup, request, args.json)
    before = _load_rounds(args.before)
    rllm_exe, versions = rllm_gateway(args.rllm_env) if "rllm" in names else (None, {})
    expect = (fake.prompt_length(request), fake.completion_length(request)[0])
    rng = random.Random(args.seed)
    started = time.perf_counter()
    rounds = [_round(i, args, names, conns, totals, request, expect, rng, rllm_exe) for i in range(args.runs)]
    summary = _summarise(rounds, names, conns)
    summary["config"] = {
        "conns": conns, "requests": totals, "warmup": args.warmup, "rounds": args.runs, "seed": args.seed,
        "setups": names, "request_bytes": len(json.dumps(request)), "prompt_token_ids": expect[0],
        "completion_tokens": expect[1], "fake_max_model_len": MAX_MODEL_LEN, "cpus": os.cpu_count(),
        "machine": platform.processor() or platform.machine(), "python": platform.python_version(),
        "rllm_env": versions, "wall_s": time.perf_counter() - started}
    _report(summary, names, conns)
    if before or args.before:
        _medians(rounds, before)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"\nwall time {summary['config']['wall_s'] / 60:.1f} min")
    return 0 if summary["records"].get("forge", {}).get("lost", 0) == 0 else 1


def _round(i: int, args: argparse.Namespace, names: list[str], conns: list[int], totals: list[int],
           request: dict[str, Any], expect: tuple[int, int], rng: random.Random,
           rllm_exe: Path | None) -> dict[str, Any]:
    """One round: every setup started afresh, warmed up, then measured at each concurrency in a random order."""
    data = json.dumps(request).encode()
    tmp = Path(tempfile.mkdtemp(prefix="forge-proxy-bench-"))
    up = start_upstream(MAX_MODEL_LEN)
    out: dict[str, Any] = {"round": i + 1, "orders": {}, "results": {n: {} for n in names}, "warmup": {}}
    try:
        setups = start_setups(names, up, tmp, rllm_exe)
        try:
            for name in rng.sample(names, len(names)):
                out["warmup"][name] = _measure(setups[name], up[0].pid, data, 4, args.warmup, expect)
            for n_conns, total in zip(conns, totals, strict=True):
                order = rng.sample(names, len(names))
                out["orders"][str(n_conns)] = order
                print(f"\n== round {i + 1} of {args.runs}, {n_conns} conns, order {' '.join(order)}", flush=True)
                for name in order:
                    res = _measure(setups[name], up[0].pid, data, n_conns, total, expect)
                    out["results"][name][str(n_conns)] = res
                    _print_run(name, res)
        finally:
            stop_all(setups)
    finally:
        up[0].terminate()
        up[0].wait(10)
        shutil.rmtree(tmp, ignore_errors=True)  # the stores of a round are GBs
    out.update(_ratios(out["results"], conns))
    return out


def _measure(setup: Plain, upstream_pid: int, data: bytes, n_conns: int, total: int,
             expect: tuple[int, int]) -> dict[str, Any]:
    """One run against one setup: throughput and latency, then its store settled and checked, CPU per call."""
    cell = setup.cell()
    before = [cpu_s(p) for p in (*setup.pids, *setup.writer_pids, upstream_pid)]
    res = asyncio.run(load(setup.port, cell[0], cell[1], data, n_conns, total))
    ok = res["requests"] - res["errors"]
    if setup.stores:
        res.update(setup.settle(cell, ok, expect))
        res["sustained_rps"] = ok / (res["wall_s"] + res["drain_s"])
    after = [cpu_s(p) for p in (*setup.pids, *setup.writer_pids, upstream_pid)]
    spent = [a - b for a, b in zip(after, before, strict=True)]
    n_proc = len(setup.pids)
    per_call = 1e6 / max(1, res["requests"])
    res["proxy_cpu_us"] = sum(spent[:n_proc]) * per_call  # for direct: the fake vLLM itself
    if setup.writer_pids:
        res["writer_cpu_us"] = sum(spent[n_proc:-1]) * per_call
    res["upstream_cpu_us"] = spent[-1] * per_call
    return res


def _print_run(name: str, res: dict[str, Any]) -> None:
    cpu = f"cpu/req {res['proxy_cpu_us']:5.0f} us" + (
        f" + writer {res['writer_cpu_us']:4.0f}" if "writer_cpu_us" in res else "") + \
        f" (upstream {res['upstream_cpu_us']:4.0f})"
    store = f"  stored {res['stored']}/{res['answered']} (exact {res['stored_token_exact']}), " \
            f"drain {res['drain_s']:.2f} s" if "stored" in res else ""
    print(f"{name:<9} conns={res['conns']:<3} {res['rps']:7.0f} req/s  p50 {res['p50_ms']:7.2f} ms  "
          f"p90 {res['p90_ms']:7.2f}  p99 {res['p99_ms']:7.2f}  errors {res['errors']}  {cpu}{store}", flush=True)


def _ratios(results: dict[str, dict[str, dict[str, Any]]], conns: list[int]) -> dict[str, Any]:
    """The figures the gates are about, within one round (``conns_N``: the keys older runs' JSON has too)."""
    out: dict[str, Any] = {}
    for n in conns:
        r = {name: by_conns[str(n)] for name, by_conns in results.items()}
        ratios: dict[str, float] = {}
        forge = r.get("forge")
        for other in ("mitmdump", "core", "rllm"):
            if forge and other in r:
                ratios[f"forge_over_{other}_rps"] = forge["rps"] / r[other]["rps"]
        if forge and "rllm" in r:
            ratios["forge_over_rllm_sustained_rps"] = forge["sustained_rps"] / r["rllm"]["sustained_rps"]
        if "direct" in r:
            for name in ("mitmdump", "core", "forge", "rllm"):
                if name in r:
                    key = "added_p50_ms_vs_direct" if name == "forge" else f"{name}_added_p50_ms_vs_direct"
                    ratios[key] = r[name]["p50_ms"] - r["direct"]["p50_ms"]
        if forge and "core" in r:
            ratios["addon_added_p50_ms_vs_core"] = forge["p50_ms"] - r["core"]["p50_ms"]
            ratios["addon_cpu_us_per_call"] = forge["proxy_cpu_us"] - r["core"]["proxy_cpu_us"]
        if forge:
            ratios["writer_cpu_us_per_call"] = forge["writer_cpu_us"]
        out[f"conns_{n}"] = ratios
    return out


def _summarise(rounds: list[dict[str, Any]], names: list[str], conns: list[int]) -> dict[str, Any]:
    """Medians over rounds of every setup's figures and of every within-round ratio; the records' totals."""
    medians: dict[str, Any] = {}
    for name in names:
        for n in conns:
            runs = [r["results"][name][str(n)] for r in rounds]
            medians.setdefault(name, {})[str(n)] = {
                k: statistics.median(run[k] for run in runs) for k in runs[0] if isinstance(runs[0][k], float)}
    ratios = {f"conns_{n}": {k: statistics.median(r[f"conns_{n}"][k] for r in rounds)
                             for k in rounds[0][f"conns_{n}"]} for n in conns}
    records: dict[str, dict[str, int]] = {}
    for r in rounds:
        for name, runs in [(name, [*by_conns.values(), r["warmup"][name]]) for name, by_conns in r["results"].items()]:
            for run in runs:
                if "stored" in run:
                    totals = records.setdefault(name, {"answered": 0, "stored": 0, "stored_token_exact": 0})
                    for k in totals:
                        totals[k] += run[k]
    for totals in records.values():
        totals["lost"] = totals["answered"] - totals["stored"]
    errors = {name: sum(run["errors"] for r in rounds for run in r["results"][name].values()) for name in names}
    return {"medians": medians, "ratios": ratios, "records": records, "errors": errors, "rounds": rounds}


def _report(summary: dict[str, Any], names: list[str], conns: list[int]) -> None:
    med, ratios = summary["medians"], summary["ratios"]
    print(f"\nmedians over {len(summary['rounds'])} round(s)")
    print(f"  {'setup':<9} {'conns':>5} {'req/s':>7} {'sustained':>9} {'p50 ms':>7} {'p90 ms':>7} {'p99 ms':>7} "
          f"{'cpu/req us':>10} {'writer us':>9} {'upstream us':>11} {'drain s':>7}")
    for n in conns:
        for name in names:
            m = med[name][str(n)]

            def f(key: str, fmt: str, m: dict[str, float] = m) -> str:
                return format(m[key], fmt) if key in m else "-"
            print(f"  {name:<9} {n:>5} {f('rps', '7.0f')} {f('sustained_rps', '>9.0f')} {f('p50_ms', '7.2f')} "
                  f"{f('p90_ms', '7.2f')} {f('p99_ms', '7.2f')} {f('proxy_cpu_us', '10.0f')} "
                  f"{f('writer_cpu_us', '>9.0f')} {f('upstream_cpu_us', '11.0f')} {f('drain_s', '>7.2f')}")
    print("\ngates (median over rounds of each round's ratio)")
    for n in conns:
        r = ratios[f"conns_{n}"]
        parts = [f"{label} {r[key]:.2f}x" for label, key in (
            ("forge/core", "forge_over_core_rps"), ("forge/rLLM", "forge_over_rllm_rps"),
            ("forge/rLLM sustained", "forge_over_rllm_sustained_rps"), ("forge/mitmdump", "forge_over_mitmdump_rps"))
            if key in r]
        print(f"  conns={n:<3} " + "   ".join(parts))
        added = [f"{label} {r[key]:+.2f}" for label, key in (
            ("mitmdump", "mitmdump_added_p50_ms_vs_direct"), ("core", "core_added_p50_ms_vs_direct"),
            ("forge", "added_p50_ms_vs_direct"), ("rLLM", "rllm_added_p50_ms_vs_direct")) if key in r]
        if added:
            print(f"            p50 added over direct (ms): {'  '.join(added)}")
    print("records (all rounds, warm-ups included): " + "; ".join(
        f"{name} {t['answered']} answered, {t['stored']} stored, {t['stored_token_exact']} token-exact, "
        f"lost {t['lost']}" for name, t in summary["records"].items()))
    if any(summary["errors"].values()):
        print(f"non-200 answers: {summary['errors']}")
    t16 = ratios.get("conns_16", {}).get("forge_over_mitmdump_rps")
    t1 = ratios.get("conns_1", {}).get("added_p50_ms_vs_direct")
    lost = summary["records"].get("forge", {}).get("lost")
    print(f"targets: forge >= 95% of mitmdump at 16 conns: {_met(t16, lambda v: v >= 0.95)}; <= 1.5 ms added p50 "
          f"at 1 conn: {_met(t1, lambda v: v <= 1.5)}; zero lost records: {_met(lost, lambda v: v == 0)}")


def _met(value: float | None, test: Any) -> str:
    return "-" if value is None else "met" if test(value) else "NOT met"


def _load_rounds(files: str) -> list[dict[str, Any]]:
    """Rounds from ``--json`` files: this format (``rounds``) or the older one file per run."""
    out: list[dict[str, Any]] = []
    for f in filter(None, files.split(",")):
        data = json.loads(Path(f).read_text())
        out += data.get("rounds", [data])
    return out


def _medians(after: list[dict[str, Any]], before: list[dict[str, Any]]) -> None:
    """The medians over rounds of the figures issue 14 is about, beside those of runs before a change."""
    def med(runs: list[dict[str, Any]], conns: int, key: str) -> float | None:
        values = [r[f"conns_{conns}"][key] for r in runs if key in r.get(f"conns_{conns}", {})]
        return statistics.median(values) if values else None

    rows = [("forge/mitmdump throughput, 16 conns", 16, "forge_over_mitmdump_rps", "{:.1%}"),
            ("the addon's added p50 over the core, 1 conn (ms)", 1, "addon_added_p50_ms_vs_core", "{:.2f}"),
            ("forge's added p50 over direct, 1 conn (ms)", 1, "added_p50_ms_vs_direct", "{:.2f}"),
            ("addon CPU on the proxy's loop, 16 conns (us/call)", 16, "addon_cpu_us_per_call", "{:.0f}"),
            ("store writer CPU, 16 conns (us/call)", 16, "writer_cpu_us_per_call", "{:.0f}")]
    print(f"\nmedians of {len(after)} round(s), before: {len(before)} run(s)")
    for label, conns, key, fmt in rows:
        a, b = med(after, conns, key), med(before, conns, key)
        print(f"  {label:<52} {fmt.format(a) if a is not None else '-':>8}   "
              f"before {fmt.format(b) if b is not None else '-':>8}")
    added, added_before = med(after, 1, "addon_added_p50_ms_vs_core"), med(before, 1, "addon_added_p50_ms_vs_core")
    print("target: the addon's added p50 at 1 conn at most 0.2 ms above before: "
          f"{'met' if added is not None and added_before is not None and added <= added_before + 0.2 else 'NOT met'}")


def _replicas(n: int, conns: list[int], totals: list[int], warmup: int, request: dict[str, Any],
              out: Path | None) -> int:
    data = json.dumps(request).encode()
    tmp = Path(tempfile.mkdtemp(prefix="forge-proxy-bench-"))
    upstream, up_port = start_upstream(MAX_MODEL_LEN)
    proxies = []
    summary: dict[str, Any] = {"replicas": n, "runs": []}
    try:
        proxies = [start_proxy(f"http://127.0.0.1:{up_port}", store=tmp / f"replica-{i}.sqlite", max_output_tokens=0)
                   for i in range(n)]
        rollouts = [p.register(task="benchmark") for p in proxies]
        targets = [(int(p.url.rsplit(":", 1)[1]), f"/r/{r['rollout_id']}/v1/chat/completions", r["key"])
                   for p, r in zip(proxies, rollouts, strict=True)]
        answered = sum(r["requests"] - r["errors"] for r in asyncio.run(spread(targets, data, 4 * n, warmup * n)))
        pids = [[p.process.pid, *children(p.process.pid)] for p in proxies]
        for n_conns, total in zip(conns, totals, strict=True):
            before = [sum(cpu_s(q) for q in group) for group in pids]
            started = time.perf_counter()
            runs = asyncio.run(spread(targets, data, n_conns, total))
            wall = time.perf_counter() - started
            cpu = [(sum(cpu_s(q) for q in group) - b) / max(1, r["requests"]) * 1e6
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
        shutil.rmtree(tmp, ignore_errors=True)
    summary.update({"answered": answered, "stored": stored, "lost": answered - stored})
    print(f"records: {answered} answered, {stored} stored, lost {answered - stored}")
    if out:
        out.write_text(json.dumps(summary, indent=2))
    return 0 if answered == stored else 1


if __name__ == "__main__":
    raise SystemExit(main())
