"""Fuzz the capture proxy's HTTP surface for longer than the test suite does.

    .venv/bin/python benchmarks/fuzz_proxy.py [--duration 300] [--random 200] [--concurrency 16] [--seed 0]

The real proxy process (``start_proxy``) in front of the fake upstream (``tests/proxy/fake_upstream.py``), both
started here. Each round sends, for all four wire formats (chat completions, Responses, Anthropic Messages,
Gemini), the hand-picked cases of ``tests/proxy/fuzzing.py`` (malformed and truncated JSON, unknown shapes and
routes, bad headers and encodings, invalid UTF-8, oversized fields, an upstream answering invalid SSE, truncated
bodies, wrong content types and statuses), ``--random`` bodies with one field of a random depth given a wrong
type, and the slow-loris clients (header and body trickles, a stalled body, an idle connection); a healthy
rollout calls every format meanwhile. Rounds repeat (new random bodies) until ``--duration`` seconds have passed
(at least one round). Prints cases tried, outcomes by kind (HTTP status x wire format, stream endings,
violations such as hangs), records lost (the calls the upstream saw without a record in the store; target 0),
the healthy rollout's calls, and whether the proxy is alive at the end. Exits 1 on any violation or lost record.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from forge_cli.proxy.launcher import start_proxy  # noqa: E402
from tests.proxy import fuzzing  # noqa: E402
from tests.proxy.conftest import FakeUpstream  # noqa: E402

MAX_BODY_MB = 1
CLIENT_TIMEOUT_S = 2
UPSTREAM_TIMEOUT_S = 2


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=300.0, help="seconds to keep starting rounds (default 300)")
    ap.add_argument("--random", type=int, default=200, help="random wrong-type bodies per format per round")
    ap.add_argument("--concurrency", type=int, default=16, help="cases in flight at once")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-slowloris", action="store_true", help="leave out the trickling clients")
    ap.add_argument("--json", type=Path, help="write the summary here too")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="forge-fuzz-"))
    upstream = FakeUpstream()
    upstream.start()
    proxy = start_proxy(upstream.url, store=tmp / "traces.sqlite", max_body_mb=MAX_BODY_MB, max_output_tokens=0,
                        upstream_timeout_s=UPSTREAM_TIMEOUT_S,
                        extra_args=["--set", f"forge_client_timeout={CLIENT_TIMEOUT_S}"])
    rng = random.Random(args.seed)
    outcomes: Counter[str] = Counter()
    problems: list[str] = []
    tried = healthy = reached = lost = rounds = 0
    started = time.monotonic()
    try:
        while rounds == 0 or time.monotonic() - started < args.duration:
            cases = [c for fmt in fuzzing.FORMATS
                     for c in fuzzing.cases_for(fmt, rng, args.random, MAX_BODY_MB << 20)]
            if not args.no_slowloris:
                cases += [c for fmt in fuzzing.FORMATS for c in fuzzing.slowloris_cases(fmt)]
            for c in cases:
                c.id = f"r{rounds}-{c.id}"
            results, ok_calls, ids, healthy_rollout = asyncio.run(
                fuzzing.run(proxy.url, proxy.admin_token, cases, args.concurrency,
                            deadline=UPSTREAM_TIMEOUT_S + CLIENT_TIMEOUT_S + 12))
            report = fuzzing.check(results, ok_calls, ids, healthy_rollout, upstream.url, proxy.store)
            rounds += 1
            tried += len(results)
            healthy += len(ok_calls)
            reached += report.reached
            lost += report.lost
            outcomes.update(report.by_kind())
            outcomes.update(f"slowloris {r.outcome} ({r.case.send})" for r in results if r.case.kind == "slowloris")
            problems += report.problems
            print(f"round {rounds}: {len(results)} cases, {report.reached} reached the upstream, "
                  f"{report.lost} records lost, {len(report.problems)} problems, "
                  f"{time.monotonic() - started:.0f}s", flush=True)
        alive = proxy.alive() and proxy.health()["ok"]
    finally:
        proxy.stop()
        upstream.stop()
    elapsed = time.monotonic() - started
    violations = sum(n for k, n in outcomes.items() if "violation" in k)
    print(f"\ncases tried: {tried} in {rounds} round(s), {elapsed:.0f}s ({tried / elapsed:.1f} cases/s), "
          f"healthy calls alongside: {healthy}")
    print("outcomes by wire format (http_<status>: an error in the format's shape; stream_error: a 200 stream "
          "ending in the format's error event):")
    for key, n in sorted(outcomes.items()):
        print(f"  {key:<60} {n}")
    print(f"calls that reached the upstream: {reached}; records lost: {lost} (target 0)")
    print(f"violations (hangs, wrong shapes, no answer): {violations}; problems: {len(problems)}")
    for line in problems[:40]:
        print("  " + line)
    print(f"proxy alive at the end: {'yes' if alive else 'NO'}")
    summary: dict[str, Any] = {"cases": tried, "rounds": rounds, "seconds": elapsed, "healthy_calls": healthy,
                               "outcomes": dict(outcomes), "reached_upstream": reached, "records_lost": lost,
                               "violations": violations, "problems": problems, "alive": alive}
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 0 if alive and not lost and not problems else 1


if __name__ == "__main__":
    raise SystemExit(main())
