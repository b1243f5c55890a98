"""Did the policy's tool calls go through? Counted from the capture proxy's records of a run.

    .venv/bin/python benchmarks/tool_calls.py RUN_DIR [--min 1] [--json]

Reads every ``traces.sqlite`` under ``RUN_DIR`` (a forge run directory, or veRL's ``rollouts/`` with one run
directory per worker). A call **asked** for tools when its Chat Completions answer carries ``tool_calls`` (vLLM's
parser found a valid call); a tool call **succeeded** when a later call of the same rollout sends back a ``tool``
message with that call's id (the harness ran the tool and returned its result). Exit 1 when fewer than ``--min``
tool calls succeeded (``benchmarks/verl_smoke.sh`` uses it: a smoke run whose policy never called a tool proves
nothing about the harnesses), 2 for a directory without records.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any


def _json(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return None


def _id(value: Any) -> str:
    """A tool-call id as compared here: some harnesses rewrite ids (OpenClaw drops the ``_`` of ``call_...``)."""
    return "".join(c for c in str(value) if c.isalnum())


def _asked(response: Any) -> list[str]:
    """The ids of the tool calls in one answer: Chat Completions (``tool_calls``), Responses (``function_call``
    items) or Anthropic Messages (``tool_use`` blocks), as the harness received it."""
    if not isinstance(response, dict):
        return []
    ids = []
    for choice in response.get("choices") or []:
        calls = ((choice or {}).get("message") or {}).get("tool_calls") or []
        ids += [c.get("id") for c in calls if isinstance(c, dict)]
    ids += [i.get("call_id") for i in response.get("output") or []
            if isinstance(i, dict) and i.get("type") == "function_call"]
    if isinstance(response.get("content"), list):
        ids += [b.get("id") for b in response["content"] if isinstance(b, dict) and b.get("type") == "tool_use"]
    return [_id(i) for i in ids if i]


def _answered(request: Any) -> set[str]:
    """The tool-call ids a request returns results for: ``tool`` messages of the Chat Completions request sent
    upstream (the proxy translates the other wire formats into it)."""
    if not isinstance(request, dict):
        return set()
    return {_id(m["tool_call_id"]) for m in request.get("messages") or []
            if isinstance(m, dict) and m.get("role") == "tool" and m.get("tool_call_id")}


def count(run_dir: Path) -> dict[str, int]:
    """Calls, calls that asked for tools, tool calls and the tool calls whose result came back, over ``run_dir``."""
    stores = sorted(run_dir.rglob("traces.sqlite"))
    totals = {"stores": len(stores), "calls": 0, "calls_with_tool_calls": 0, "tool_calls": 0, "succeeded": 0}
    for store in stores:
        conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
        try:
            rows = conn.execute("SELECT rollout_id, COALESCE(upstream_request, request), response FROM calls "
                                "ORDER BY rollout_id, seq, id")
            asked: dict[str, set[str]] = defaultdict(set)
            answered: dict[str, set[str]] = defaultdict(set)
            for rollout_id, request, response in rows:
                totals["calls"] += 1
                ids = _asked(_json(response))
                totals["calls_with_tool_calls"] += bool(ids)
                asked[rollout_id].update(ids)
                answered[rollout_id] |= _answered(_json(request))
        finally:
            conn.close()
        for rollout_id, ids in asked.items():
            totals["tool_calls"] += len(ids)
            totals["succeeded"] += len(ids & answered[rollout_id])
    return totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="a forge run directory (or a directory holding several)")
    parser.add_argument("--min", type=int, default=1, help="tool calls that must have succeeded (default 1)")
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")
    args = parser.parse_args(argv)
    totals = count(args.run_dir)
    if not totals["calls"]:
        print(f"tool_calls: no recorded calls under {args.run_dir} (no traces.sqlite with calls)", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(totals))
    else:
        print(f"tool_calls: {totals['calls']} calls in {totals['stores']} run(s); {totals['calls_with_tool_calls']} "
              f"asked for tools ({totals['tool_calls']} tool calls), {totals['succeeded']} came back with a result")
    if totals["succeeded"] < args.min:
        print(f"tool_calls: {totals['succeeded']} tool call(s) succeeded, fewer than --min {args.min}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
