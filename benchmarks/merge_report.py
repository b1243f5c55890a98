"""Merge report: how much of each harness's history is append-only, as the policy's token ids show it.

forge merges consecutive calls of a rollout into one training sequence only when the next call's prompt
token ids start with the previous call's prompt + completion ids; otherwise a new segment starts
(compaction, sub-agents, a title call, rewritten history, a changing system prompt). This script runs forge's
own sample builder (``forge_cli/train/samples.py``, the one every trainer uses) over the recorded calls and
reports, per harness, the share of trainable calls that extend the previous trainable call of the same
rollout that way, next to a baseline (forge's own ``react``, whose history is append-only by construction).
Calls that cannot train (status other than ``ok``, no token ids, a NaN logprob) are skipped as the builder
skips them: they neither merge nor break a sequence.

    # report on existing run directories (any `forge rollout` output; several harnesses at once)
    .venv/bin/python benchmarks/merge_report.py RUN_DIR [RUN_DIR ...] [--baseline react] [--json out.json]

    # or run one small rollout per harness first (docker sandboxes, the bundles must be installed:
    # scripts/setup.sh harnesses), against a running policy server or one `forge rollout` starts itself
    .venv/bin/python benchmarks/merge_report.py --run [--harnesses react,pi,codex] [--tasks 2]
        [--upstream http://127.0.0.1:8000] [--output-dir DIR] [--runtime docker] [-- EXTRA OVERRIDES]

Columns: ``rollouts``; ``calls`` that can train (+ those that cannot); ``next calls``, trainable calls that have a
trainable predecessor in their rollout; ``merge`` = share of those whose prompt starts with the previous prompt +
completion (they join its training sequence); ``prompt prefix`` = share whose prompt at least starts with the
previous *prompt* (history kept, but the previous answer was re-rendered differently, e.g. tool-call formatting,
or re-tokenized: a sampled token sequence that is not the tokenizer's own encoding of its text);
``segments/rollout``, the training sequences a rollout yields; ``vs baseline``, merge minus the baseline's merge,
in points. With a 135M model most harnesses stop after one call (it seldom emits a valid tool call), so small
samples carry little weight: run more tasks (``--tasks``) or a stronger model for figures that matter.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from forge_cli.errors import UserError  # noqa: E402
from forge_cli.eval.metrics import bootstrap_mean_ci  # noqa: E402
from forge_cli.proxy.wire.exchange import NoExchange, chat_answer, chat_request  # noqa: E402
from forge_cli.serve.tokenizer import Decode, load_decoder, model_dir_of_run  # noqa: E402
from forge_cli.traces.record import CallRecord  # noqa: E402
from forge_cli.traces.store import iter_calls, open_store  # noqa: E402
from forge_cli.train.samples import MergeStats, segment_calls  # noqa: E402

DEFAULT_HARNESSES = ("react", "openclaw", "codex", "claude-code", "pi", "opencode", "qwen-code", "gemini-cli",
                     "mini-swe-agent")


@dataclass
class HarnessStats(MergeStats):
    """The builder's merge figures of one harness, the wire formats its calls used, each rollout's figures (for the
    intervals) and what broke each merge that did not happen (``break_cause``)."""

    wire_formats: set[str] = field(default_factory=set)
    # per rollout: (trainable calls, next calls, merged, segments)
    per_rollout: list[tuple[int, int, int, int]] = field(default_factory=list)
    breaks: Counter[str] = field(default_factory=Counter)

    @property
    def multi_call(self) -> int:
        """Rollouts with at least two trainable calls (the only ones a merge can happen in)."""
        return sum(1 for trainable, *_ in self.per_rollout if trainable >= 2)

    def merge_interval(self) -> tuple[float, float] | None:
        """95% bootstrap interval of the merge share, resampling rollouts (a rollout's calls are not independent)."""
        values = [1.0 if n < merged else 0.0 for _, nxt, merged, _ in self.per_rollout for n in range(nxt)]
        clusters = [str(i) for i, (_, nxt, _, _) in enumerate(self.per_rollout) for _ in range(nxt)]
        return bootstrap_mean_ci(values, clusters=clusters) if values else None

    def segments_interval(self) -> tuple[float, float] | None:
        values = [float(segments) for *_, segments in self.per_rollout]
        return bootstrap_mean_ci(values) if values else None

    def to_dict(self) -> dict[str, Any]:
        merge, segments = self.merge_interval(), self.segments_interval()
        return {**super().to_dict(), "wire_formats": sorted(self.wire_formats), "multi_call_rollouts": self.multi_call,
                "merge_share_ci": list(merge) if merge else None,
                "segments_per_rollout": self.stats.segments / self.rollouts if self.rollouts else None,
                "segments_per_rollout_ci": list(segments) if segments else None, "breaks": dict(self.breaks)}


def _messages(call: CallRecord) -> tuple[Any, Any, list[Any]]:
    body = chat_request(call)
    found = body.get("messages")
    messages: list[Any] = found if isinstance(found, list) else []
    first = messages[0] if messages and messages[0].get("role") in ("system", "developer") else None
    return first, body.get("tools"), messages


def _said(message: Any) -> tuple[str, list[tuple[str, Any]]]:
    """An assistant message's text and tool calls (name, parsed arguments), the fields a chat template renders."""
    if not isinstance(message, dict):
        return "", []
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {} if isinstance(call, dict) else {}
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):
                arguments = json.loads(arguments)
        calls.append((str(function.get("name")), arguments))
    content = message.get("content")
    text = content if isinstance(content, str) else "\n".join(
        str(p.get("text", "")) for p in content if isinstance(p, dict)) if isinstance(content, list) else ""
    return text.strip(), calls


def break_cause(previous: CallRecord, call: CallRecord, decode: Decode | None = None) -> str:
    """Why ``call`` did not extend ``previous`` (the rollout's trainable call before it), in words: from the token
    ids where they say it, else from the forwarded Chat Completions messages. ``decode`` (the policy's tokenizer)
    tells an answer whose same text came back in other ids from one the template wrote in another form (the same
    text and tool calls, parsed, written otherwise: e.g. a call the model wrote without ``arguments`` rendered back
    with ``"arguments": {}``); without it the two read as one cause."""
    prompt, before = call.prompt_token_ids or [], previous.prompt_token_ids or []
    if prompt == before:
        return "the same prompt sent again (a retry)"
    (system, tools, messages), (system_before, tools_before, messages_before) = _messages(call), _messages(previous)
    if prompt[:len(before)] == before:
        if previous.finish_reason == "length":
            return "history kept; the previous answer, cut at the output limit, re-rendered closed"
        sent = messages[len(messages_before)] if len(messages) > len(messages_before) else None
        try:
            answer = chat_answer(previous)["choices"][0]["message"]
        except (NoExchange, LookupError, TypeError):
            answer = None
        if sent is None or answer is None:
            return "history kept, the previous answer re-rendered otherwise (no messages recorded to say how)"
        if _said(sent) == _said(answer):
            if decode is None:
                return "history kept; the previous answer's same content in other ids (no tokenizer to say how)"
            if decode(prompt[len(before):]).startswith(decode(list(previous.completion_token_ids or []))):
                return "history kept; the previous answer's same text re-tokenized to other ids"
            return ("history kept; the previous answer's same content written back in another form by the chat "
                    "template (e.g. a call without arguments rendered with \"arguments\": {})")
        return "history kept; the harness sent the previous answer back with other text or tool-call fields"
    if not messages or not messages_before:
        return "the prompt leaves the previous prompt (no messages recorded to say how)"
    if system != system_before or tools != tools_before:
        return "another system prompt or tool list (a side call, or a changed system prompt)"
    if messages[:len(messages_before)] != messages_before:
        return "earlier messages changed or removed (rewritten history)"
    return "the same messages rendered to other ids"


def _harness_of_run(run_dir: Path) -> str | None:
    summary = run_dir / "summary.json"
    if summary.is_file():
        return str(json.loads(summary.read_text()).get("harness") or "") or None
    return None


def read_run(run_dir: Path) -> tuple[dict[str, str], dict[str, set[str]], dict[str, list[CallRecord]]]:
    """(rollout -> harness, harness -> wire formats, rollout -> its calls in order) of one run directory."""
    store = run_dir / "traces.sqlite"
    if not store.is_file():
        raise SystemExit(f"merge_report: {run_dir} has no traces.sqlite (not a `forge rollout` run directory)")
    fallback = _harness_of_run(run_dir) or run_dir.name
    conn = open_store(store, readonly=True)
    try:
        harness_of = {row["rollout_id"]: (row["harness"] or fallback)
                      for row in conn.execute("SELECT rollout_id, harness FROM rollouts")}
        calls: dict[str, list[CallRecord]] = {}
        for call in iter_calls(conn):
            calls.setdefault(call.rollout_id, []).append(call)
    finally:
        conn.close()
    wires: dict[str, set[str]] = {}
    for rid, chain in calls.items():
        harness = harness_of.setdefault(rid, fallback)
        wires.setdefault(harness, set()).update(c.wire_format for c in chain)
    return harness_of, wires, calls


def _decoder(run_dir: Path) -> Decode | None:
    """The run's policy tokenizer as a decoder (``forge_cli/serve/tokenizer.py``), or None where the run's model
    is unknown (an external endpoint) or has no tokenizer here."""
    model_dir = model_dir_of_run(run_dir)
    if model_dir is None:
        return None
    try:
        return load_decoder(model_dir)
    except (UserError, OSError, ValueError):
        return None


def analyse(run_dirs: list[Path]) -> dict[str, HarnessStats]:
    """Per harness: forge's sample builder's merge figures over every rollout of the runs."""
    stats: dict[str, HarnessStats] = {}
    for run_dir in run_dirs:
        harness_of, wires, calls = read_run(run_dir)
        decode = _decoder(run_dir)
        for rid, harness in harness_of.items():
            chain = sorted(calls.get(rid, []), key=lambda c: c.seq)
            _, rollout_stats, decisions = segment_calls(chain)
            st = stats.setdefault(harness, HarnessStats(harness))
            st.add(rollout_stats)
            st.per_rollout.append((rollout_stats.trainable, rollout_stats.transitions, rollout_stats.merged,
                                   rollout_stats.segments))
            by_seq = {c.seq: c for c in chain}
            previous: CallRecord | None = None
            for seq, reason in decisions:
                if reason == "prefix-mismatch" and previous is not None:
                    st.breaks[break_cause(previous, by_seq[seq], decode)] += 1
                if reason in ("first", "merged", "prefix-mismatch"):
                    previous = by_seq[seq]
        for harness, formats in wires.items():
            stats[harness].wire_formats |= formats
    return stats


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def _interval(value: float | None, ci: tuple[float, float] | None, percent: bool) -> str:
    if value is None or ci is None:
        return "n/a"
    if percent:
        return f"{100 * value:.0f}% ({100 * ci[0]:.0f}..{100 * ci[1]:.0f})"
    return f"{value:.2f} ({ci[0]:.2f}..{ci[1]:.2f})"


def render(stats: dict[str, HarnessStats], baseline: str) -> str:
    base = stats.get(baseline)
    base_share = base.merge_share if base else None
    header = ("harness", "wire", "rollouts", "multi-call", "calls", "next calls", "merge (95% CI)", "prompt prefix",
              "segments/rollout (95% CI)", f"vs {baseline}")
    lines = []
    order = sorted(stats.values(), key=lambda s: (s.harness != baseline, s.harness))
    for st in order:
        share = st.merge_share
        delta = ("baseline" if st.harness == baseline else
                 "n/a" if share is None or base_share is None else f"{100 * (share - base_share):+.0f} pts")
        figures = st.stats
        skipped = figures.calls - figures.trainable
        calls = f"{figures.trainable}" + (f" (+{skipped} not trainable)" if skipped else "")
        lines.append((st.harness, ",".join(sorted(st.wire_formats)) or "-", str(st.rollouts), str(st.multi_call),
                      calls, str(figures.transitions), _interval(share, st.merge_interval(), True),
                      _pct(st.prompt_prefix_share),
                      _interval(figures.segments / st.rollouts if st.rollouts else None, st.segments_interval(),
                                False), delta))
    widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in lines]
    if base is None:
        out.append(f"(no '{baseline}' rollouts in these runs: no baseline column)")
    broken = [st for st in order if st.breaks]
    if broken:
        out.append("\nwhat breaks the merge (next calls that started a new segment, by cause):")
        for st in broken:
            out += [f"  {st.harness}: {n} x {cause}" for cause, n in st.breaks.most_common()]
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
    argv = list(sys.argv[1:] if argv is None else argv)
    # overrides after "--" go to every forge rollout (a positional would otherwise take them as run directories)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    run_dirs = list(args.run_dirs)
    if args.run:
        harnesses = [h.strip() for h in args.harnesses.split(",") if h.strip()]
        run_dirs += run_harnesses(harnesses, args.tasks, args.upstream, args.output_dir.resolve(), args.runtime,
                                  extra)
    elif extra:
        parser.error(f"overrides after -- need --run: {' '.join(extra)}")
    if not run_dirs and args.run:
        print("error: no harness run finished (see above); nothing to report", file=sys.stderr)
        return 1
    if not run_dirs:
        parser.error("give run directories, or --run")
    stats = analyse(run_dirs)
    print(render(stats, args.baseline))
    if args.json:
        args.json.write_text(json.dumps({h: s.to_dict() for h, s in stats.items()}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
