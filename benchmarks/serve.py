"""Benchmark the policy server (vLLM, CPU build here) against plain transformers ``generate``.

    .venv/bin/python benchmarks/serve.py [--max-tokens 32] [--concurrency 1,8,32] [--json]
    .venv/bin/python benchmarks/serve.py --prefill 2000,9000,11500 [--json]

``--prefill``: vLLM only; seconds to prefill one prompt of each length (one answer token, a fresh prompt each time,
so no prefix cache helps), twice each; the served context is raised to hold the longest. The rate it gives for the
default model is the one ``forge_cli/rollout/plan.py`` (PREFILL_TOKENS_PER_S) quotes when model.auto_context raises
the context for a harness's long first prompt.

Same model (the prepared default model unless ``--model-overrides`` picks another), same machine,
one after the other (never at the same time):

- start-up: ``forge_cli.serve.start_server`` until ``/health`` answers, vs ``from_pretrained``;
- generated tokens/s with 1, 8 and 32 concurrent chat requests of exactly ``--max-tokens`` tokens
  each (``ignore_eos``), vs ``generate`` on a batch of the same size (``min_new_tokens``);
- weight-update latency: ``update_weights`` (pause, in-place reload, resume) vs ``load_state_dict``
  from the same safetensors; ``--restart`` also times a managed restart.

Default run: about 2-4 minutes on 2 idle cores (much longer on a loaded machine).
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PROMPT = "Write a short story about a robot who learns to paint."


def hf_baseline(model_dir: Path, max_tokens: int, batches: list[int], threads: int, dtype: str) -> dict[str, Any]:
    """Run benchmarks/_hf_baseline.py in the vLLM environment and return its JSON."""
    from forge_cli.serve.prepare import vllm_python

    proc = subprocess.run([str(vllm_python()), str(Path(__file__).with_name("_hf_baseline.py")), str(model_dir),
                           str(max_tokens), ",".join(map(str, batches)), str(threads), dtype],
                          capture_output=True, text=True, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("FORGE_RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"transformers baseline failed:\n{proc.stderr[-3000:]}")
    return dict(json.loads(lines[-1].removeprefix("FORGE_RESULT ")))


async def _throughput(base_url: str, model: str, concurrency: int, requests: int, max_tokens: int) -> float:
    import httpx

    body = {"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": max_tokens,
            "temperature": 0.8, "ignore_eos": True}
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, timeout=600, limits=limits) as client:

        async def one() -> int:
            async with gate:
                response = await client.post("/chat/completions", json=body)
                response.raise_for_status()
                return int(response.json()["usage"]["completion_tokens"])

        await one()  # warm-up
        started = time.perf_counter()
        tokens = sum(await asyncio.gather(*(one() for _ in range(requests))))
        return tokens / (time.perf_counter() - started)


def prefill_side(overrides: list[str], lengths: list[int], repeats: int = 2) -> dict[str, Any]:
    """Seconds to prefill a fresh prompt of each length (random token ids, one answer token), ``repeats`` times."""
    import random

    import httpx

    from forge_cli.config.compose import compose
    from forge_cli.serve import start_server

    need = max(lengths) + 16
    model = compose([*overrides, f"model.max_model_len={-(-need // 1024) * 1024}"]).experiment.model
    server = start_server(model, port=0, log=lambda m: print(f"  {m}", file=sys.stderr))
    rng = random.Random(0)
    result: dict[str, Any] = {"dtype": server.launch.argv[server.launch.argv.index("--dtype") + 1],
                              "cores": os.cpu_count(), "seconds": {}}
    try:
        with httpx.Client(base_url=server.base_url, timeout=3600) as client:
            for length in [min(lengths), *lengths]:  # the first: a warm-up, overwritten by its counted run
                prompt = [rng.randrange(1000, 40000) for _ in range(length)]
                body = {"model": server.model, "prompt": prompt, "max_tokens": 1, "temperature": 0}
                times = []
                for _ in range(repeats):
                    prompt[0] = rng.randrange(1000, 40000)  # a new first token: nothing cached
                    started = time.perf_counter()
                    client.post("/completions", json=body).raise_for_status()
                    times.append(time.perf_counter() - started)
                result["seconds"][str(length)] = statistics.median(times)
    finally:
        server.stop()
    result["tokens_per_s"] = {k: int(k) / v for k, v in result["seconds"].items() if v}
    return result


def vllm_side(overrides: list[str], max_tokens: int, levels: list[int], restart: bool) -> dict[str, Any]:
    from forge_cli.config.compose import compose
    from forge_cli.serve import start_server, update_weights

    model = compose(overrides).experiment.model
    started = time.perf_counter()
    server = start_server(model, port=0, log=lambda m: print(f"  {m}", file=sys.stderr))
    result: dict[str, Any] = {"startup_s": time.perf_counter() - started, "tok_s": {},
                              "model_dir": str(server.launch.model_path),
                              "dtype": server.launch.argv[server.launch.argv.index("--dtype") + 1]}
    try:
        for level in levels:
            requests = max(2 * level, 4)
            result["tok_s"][str(level)] = asyncio.run(
                _throughput(server.base_url, server.model, level, requests, max_tokens))
            print(f"  vLLM: {level} concurrent → {result['tok_s'][str(level)]:.0f} tok/s", file=sys.stderr)
        times = []
        for _ in range(3):
            started = time.perf_counter()
            update_weights(server, server.launch.model_path)
            times.append(time.perf_counter() - started)
        result["update_s"] = statistics.median(times)
        if restart:
            started = time.perf_counter()
            update_weights(server, server.launch.model_path, mode="restart")
            result["restart_s"] = time.perf_counter() - started
    finally:
        server.stop()
    return result


def table(vllm: dict[str, Any], hf: dict[str, Any] | None, levels: list[int], max_tokens: int) -> str:
    rows: list[tuple[str, float, float | None, bool]] = [("start-up / load (s)", vllm["startup_s"],
                                                          hf["load_s"] if hf else None, False)]
    for level in levels:
        rows.append((f"generated tok/s, {level} concurrent", vllm["tok_s"][str(level)],
                     hf["tok_s"][str(level)] if hf else None, True))
    rows.append(("weight update (s)", vllm["update_s"], hf["update_s"] if hf else None, False))
    if "restart_s" in vllm:
        rows.append(("weight update by restart (s)", vllm["restart_s"], None, False))
    lines = [f"{'':34} {'vLLM (forge serve)':>19} {'transformers':>13} {'ratio':>8}", "-" * 78]
    for name, ours, theirs, higher_better in rows:
        ratio = "" if not theirs else (f"{ours / theirs:.1f}x" if higher_better else f"{theirs / ours:.2f}x")
        theirs_text = f"{theirs:.2f}" if theirs is not None else "-"
        lines.append(f"{name:34} {ours:>19.2f} {theirs_text:>13} {ratio:>8}")
    lines.append(f"(ratio: how many times better vLLM is; {max_tokens} tokens per request; vLLM: {vllm['dtype']}; "
                 "transformers: "
                 f"{hf['dtype'] if hf else '?'}, {hf['threads'] if hf else '?'} torch thread(s); machine load "
                 f"average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-tokens", type=int, default=32, help="tokens generated per request")
    parser.add_argument("--concurrency", default="1,8,32", help="comma-separated concurrency levels")
    parser.add_argument("--restart", action="store_true", help="also time a weight update by managed restart")
    parser.add_argument("--skip-baseline", action="store_true", help="vLLM only")
    parser.add_argument("--hf-threads", type=int, default=max(1, (os.cpu_count() or 2) - 1),
                        help="torch threads for transformers (default: the cores vLLM's CPU worker computes on, "
                        "all but one)")
    parser.add_argument("--hf-dtype", default=None, help="transformers dtype (default: the one vLLM serves in)")
    parser.add_argument("--prefill", default=None, help="comma-separated prompt lengths: time their prefill "
                        "(vLLM only, no other measurement)")
    parser.add_argument("--json", action="store_true", help="print the raw results as JSON")
    parser.add_argument("overrides", nargs="*", help="experiment overrides selecting the model, e.g. model=vllm ...")
    args = parser.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]
    if args.prefill:
        measured = prefill_side(args.overrides, [int(x) for x in args.prefill.split(",")])
        if args.json:
            print(json.dumps(measured, indent=2))
        else:
            for length, seconds in measured["seconds"].items():
                print(f"prefill {length:>6} tokens: {seconds:6.1f} s ({int(length) / seconds:.0f} tokens/s)")
            print(f"({measured['dtype']}, {measured['cores']} cores, load average {os.getloadavg()[0]:.1f})")
        return

    from forge_cli.config.compose import compose
    from forge_cli.config.schema import SmolModel
    from forge_cli.serve.prepare import resolve_model

    model = compose(args.overrides).experiment.model
    assert not isinstance(model, dict)
    if not isinstance(model, SmolModel) and getattr(model, "source", "") != "vllm":
        raise SystemExit("benchmark a model forge serves (smollm2 or vllm)")
    prepared = resolve_model(model)  # type: ignore[arg-type]
    hf = None
    if not args.skip_baseline:
        print("transformers generate baseline ...", file=sys.stderr)
        from forge_cli.serve.server import serving_dtype

        dtype = args.hf_dtype or serving_dtype(model)  # type: ignore[arg-type]
        dtype = "bfloat16" if dtype == "auto" else dtype
        hf = hf_baseline(prepared.path, args.max_tokens, levels, args.hf_threads, dtype)
    print("vLLM ...", file=sys.stderr)
    ours = vllm_side(args.overrides, args.max_tokens, levels, args.restart)
    if args.json:
        print(json.dumps({"vllm": ours, "transformers": hf}, indent=2))
    else:
        print(table(ours, hf, levels, args.max_tokens))


if __name__ == "__main__":
    main()
