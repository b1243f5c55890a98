"""Merge report: how much of each harness's history is append-only, as the policy's token ids show it.

forge merges consecutive calls of a rollout into one training sequence only when the next call's prompt
token ids start with the previous call's prompt + completion ids; otherwise a new segment starts
(compaction, sub-agents, a title call, rewritten history, a changing system prompt). This script measures,
per harness, the share of calls that extend the previous call of the same rollout that way, next to a
baseline (forge's own ``react``, whose history is append-only by construction).

    # report on existing run directories (any `forge rollout` output; several harnesses at once)
    .venv/bin/python benchmarks/merge_report.py RUN_DIR [RUN_DIR ...] [--baseline react] [--json out.json]

    # or run one small rollout per harness first (docker sandboxes, the bundles must be installed:
    # scripts/setup.sh harnesses), against a running policy server or one `forge rollout` starts itself
    .venv/bin/python benchmarks/merge_report.py --run [--harnesses react,pi,codex] [--tasks 2]
        [--upstream http://127.0.0.1:8000] [--output-dir DIR] [--runtime docker] [-- EXTRA OVERRIDES]

Columns: ``rollouts``; ``calls`` with token ids; ``next calls``, calls that have a predecessor in their rollout;
``merge`` = share of those whose prompt starts with the previous prompt + completion (they join its training
sequence); ``prompt prefix`` = share whose prompt at least starts with the previous *prompt* (history kept,
but the previous answer was re-rendered differently, e.g. tool-call formatting); ``segments/rollout``, the
training sequences a rollout yields; ``vs baseline``, merge minus the baseline's merge, in points. With a
135M model most harnesses stop after one call (it seldom emits a valid tool call), so small samples carry
little weight: run more tasks (``--tasks``) or a stronger model for figures that matter.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_HARNESSES = ("react", "openclaw", "codex", "claude-code", "pi", "opencode", "qwen-code", "gemini-cli",
                     "mini-swe-agent")


@dataclass
class Call:
    rollout_id: str
    seq: int
    prompt: list[int]
    completion: list[int]


@dataclass
class HarnessStats:
    harness: str
    wire_formats: set[str] = field(default_factory=set)
    rollouts: int = 0
    calls: int = 0
    calls_without_ids: int = 0
    transitions: int = 0
    merged: int = 0
    prompt_prefix: int = 0
    segments: int = 0

    @property
    def merge_share(self) -> float | None:
        return self.merged / self.transitions if self.transitions else None

    @property
    def prefix_share(self) -> float | None:
        return self.prompt_prefix / self.transitions if self.transitions else None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["wire_formats"] = sorted(self.wire_formats)
        data["merge_share"] = self.merge_share
        data["prompt_prefix_share"] = self.prefix_share
        return data


def extends(previous: Call, current: Call) -> bool:
    """The current prompt starts with the previous prompt + completion: one training sequence."""
    history = previous.prompt + previous.completion
    return len(current.prompt) >= len(history) and current.prompt[:len(history)] == history


def _harness_of_run(run_dir: Path) -> str | None:
    summary = run_dir / "summary.json"
    if summary.is_file():
        return str(json.loads(summary.read_text()).get("harness") or "") or None
    return None


def read_run(run_dir: Path) -> tuple[dict[str, str], dict[str, set[str]], list[Call]]:
    """(rollout -> harness, harness -> wire formats, calls in order) of one run directory."""
    store = run_dir / "traces.sqlite"
    if not store.is_file():
        raise SystemExit(f"merge_report: {run_dir} has no traces.sqlite (not a `forge rollout` run directory)")
    fallback = _harness_of_run(run_dir) or run_dir.name
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        harness_of = {rid: (h or fallback) for rid, h in db.execute("SELECT rollout_id, harness FROM rollouts")}
        rows = db.execute("SELECT rollout_id, seq, wire_format, prompt_token_ids, completion_token_ids FROM calls "
                          "ORDER BY rollout_id, seq").fetchall()
    wires: dict[str, set[str]] = {}
    calls = []
    for rid, seq, wire, prompt, completion in rows:
        harness = harness_of.setdefault(rid, fallback)
        wires.setdefault(harness, set()).add(wire)
        calls.append(Call(rid, int(seq), json.loads(prompt) if prompt else [],
                          json.loads(completion) if completion else []))
    return harness_of, wires, calls


def analyse(run_dirs: list[Path]) -> dict[str, HarnessStats]:
    stats: dict[str, HarnessStats] = {}
    for run_dir in run_dirs:
        harness_of, wires, calls = read_run(run_dir)
        for harness in harness_of.values():
            stats.setdefault(harness, HarnessStats(harness)).rollouts += 1
        for harness, formats in wires.items():
            stats[harness].wire_formats |= formats
        by_rollout: dict[str, list[Call]] = {}
        for call in calls:
            by_rollout.setdefault(call.rollout_id, []).append(call)
        for rid, chain in by_rollout.items():
            st = stats[harness_of[rid]]
            previous: Call | None = None
            for call in chain:
                if not call.prompt:
                    # no token ids (an upstream error): the chain breaks here
                    st.calls_without_ids += 1
                    previous = None
                    continue
                st.calls += 1
                if previous is None:
                    st.segments += 1
                else:
                    st.transitions += 1
                    if extends(previous, call):
                        st.merged += 1
                    else:
                        st.segments += 1
                    st.prompt_prefix += call.prompt[:len(previous.prompt)] == previous.prompt
                previous = call
    return stats


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def render(stats: dict[str, HarnessStats], baseline: str) -> str:
    base = stats.get(baseline)
    base_share = base.merge_share if base else None
    header = ("harness", "wire", "rollouts", "calls", "next calls", "merge", "prompt prefix", "segments/rollout",
              f"vs {baseline}")
    lines = []
    order = sorted(stats.values(), key=lambda s: (s.harness != baseline, s.harness))
    for st in order:
        share = st.merge_share
        delta = ("baseline" if st.harness == baseline else
                 "n/a" if share is None or base_share is None else f"{100 * (share - base_share):+.0f} pts")
        calls = f"{st.calls}" + (f" (+{st.calls_without_ids} w/o ids)" if st.calls_without_ids else "")
        lines.append((st.harness, ",".join(sorted(st.wire_formats)) or "-", str(st.rollouts), calls,
                      str(st.transitions), _pct(share), _pct(st.prefix_share),
                      f"{st.segments / st.rollouts:.2f}" if st.rollouts else "n/a", delta))
    widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in lines]
    if base is None:
        out.append(f"(no '{baseline}' rollouts in these runs: no baseline column)")
    return "\n".join(out)


def run_harnesses(harnesses: list[str], tasks: int, upstream: str | None, output_dir: Path, runtime: str,
                  extra: list[str]) -> list[Path]:
    """One small `forge rollout` per harness (in turn) against one policy server; returns the run directories."""
    if upstream is None:
        # one server for every harness (each `forge rollout` would otherwise start its own)
        sys.path.insert(0, str(ROOT))
        from forge_cli.config.compose import compose
        from forge_cli.serve import start_server

        model = compose([o for o in extra if o.startswith("model")]).experiment.model
        print(f"starting the policy server ({getattr(model, 'source', '?')}) ...", file=sys.stderr)
        server = start_server(model, port=0, timeout=900)
        try:
            return run_harnesses(harnesses, tasks, server.url, output_dir, runtime, extra)
        finally:
            server.stop()
    run_dirs = []
    for harness in harnesses:
        overrides = [f"+harness={harness}", f"runtime={runtime}", f"rollout.max_tasks={tasks}",
                     "rollout.samples_per_task=1", "model.max_output_tokens=128", "proxy.port=0",
                     f"run.output_dir={output_dir}", f"run.name=merge-{harness}"]
        if upstream:
            overrides.append(f"proxy.upstream={upstream}")
        started = time.monotonic()
        result = subprocess.run([sys.executable, "-m", "forge_cli", "rollout", "--json", *overrides, *extra],
                                capture_output=True, text=True, cwd=ROOT, env={**os.environ, "COLUMNS": "200"},
                                check=False)
        took = time.monotonic() - started
        if result.returncode != 0:
            print(f"{harness}: forge rollout failed (exit {result.returncode}) after {took:.0f}s:\n"
                  f"{result.stderr[-2000:]}", file=sys.stderr)
            continue
        summary = json.loads(result.stdout)
        print(f"{harness}: {summary['rollouts']} rollouts {summary['status']}, {summary['calls']} calls, "
              f"{took:.0f}s -> {summary['run_dir']}", file=sys.stderr)
        run_dirs.append(Path(summary["run_dir"]))
    return run_dirs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("run_dirs", nargs="*", type=Path, help="forge rollout run directories")
    parser.add_argument("--run", action="store_true", help="run one small rollout per harness first")
    parser.add_argument("--harnesses", default=",".join(DEFAULT_HARNESSES), help="with --run: which harnesses")
    parser.add_argument("--tasks", type=int, default=2, help="with --run: builtin tasks per harness")
    parser.add_argument("--upstream", default=None, help="with --run: policy server URL (default: forge starts one)")
    parser.add_argument("--runtime", default="docker", help="with --run: sandbox runtime (docker, local)")
    parser.add_argument("--output-dir", type=Path, default=Path("runs/merge-report"), help="with --run: runs go here")
    parser.add_argument("--baseline", default="react", help="harness whose merge share is the baseline")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures as JSON here")
    args, extra = parser.parse_known_args(argv)
    extra = [e for e in extra if e != "--"]
    run_dirs = list(args.run_dirs)
    if args.run:
        harnesses = [h.strip() for h in args.harnesses.split(",") if h.strip()]
        run_dirs += run_harnesses(harnesses, args.tasks, args.upstream, args.output_dir.resolve(), args.runtime,
                                  extra)
    elif extra:
        parser.error(f"unknown arguments: {' '.join(extra)}")
    if not run_dirs:
        parser.error("give run directories, or --run")
    stats = analyse(run_dirs)
    print(render(stats, args.baseline))
    if args.json:
        args.json.write_text(json.dumps({h: s.to_dict() for h, s in stats.items()}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
