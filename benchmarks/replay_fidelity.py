"""Replay fidelity: per harness, the share of recorded rollouts with at least 3 calls that ``forge rollout --replay``
replays faithfully to their last call (every recorded call answered from the recording, every prompt equal to
the recorded one token for token, except text the harness's ``replay_volatile`` patterns excuse).

    .venv/bin/python benchmarks/replay_fidelity.py [--harnesses react,pi,codex] [--rollouts 4] [--out FILE.json]

Per harness: one ``forge rollout`` (docker sandboxes, builtin train tasks) records ``--rollouts`` rollouts through
a relay that makes the 135M model call tools on its first ``--tool-turns`` calls (``forge_cli/testing/tool_relay``:
vLLM's ``tool_choice: required``; the default model rarely calls a tool by itself and forge ships no checkpoint that
does), so rollouts have several calls; then every recorded rollout with at least 3 calls is replayed to its last
call (``forge rollout --replay RUN/ROLLOUT``, the policy server behind the replay), in a fresh sandbox. The table
gives n (rollouts with >= 3 calls), how many replayed faithfully, the share with its 95% Wilson interval, the share
of compared prompt tokens that were masked, and where the unfaithful ones diverged. Resumable: a harness already in
``--out`` is not run again (``--fresh`` runs it again, ``--add`` adds another round of rollouts to its row). Needs
the bundles (scripts/setup.sh harnesses) and docker; one vLLM at a 32,768-token context serves every harness (their
first prompts run to ~17,000 tokens).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from forge_cli.eval.metrics import wilson_interval  # noqa: E402

HARNESSES = ("react", "pi", "mini-swe-agent", "codex", "claude-code", "openclaw", "opencode", "qwen-code",
             "gemini-cli")
CONTEXT = 32768


def _forge(*args: str, timeout: float = 3600) -> tuple[dict[str, Any] | None, str]:
    result = subprocess.run([sys.executable, "-m", "forge_cli", *args, "--json"], capture_output=True, text=True,
                            cwd=ROOT, env={**os.environ, "COLUMNS": "200"}, timeout=timeout, check=False)
    out = result.stdout
    if result.returncode != 0 or "{" not in out:
        return None, result.stderr[-1500:]
    return json.loads(out[out.index("{"):]), result.stderr


def measure(harness: str, policy: str, relay: str, rollouts: int, output_dir: Path, runtime: str) -> dict[str, Any]:
    """Record ``rollouts`` rollouts of ``harness``, replay each with >= 3 calls; the harness's row."""
    started = time.monotonic()
    common = [f"+harness={harness}", f"runtime={runtime}", "proxy.port=0", f"model.max_model_len={CONTEXT}",
              "model.max_output_tokens=128", "env.split=train"]
    recorded, err = _forge("rollout", *common, f"proxy.upstream={relay}", f"rollout.max_tasks={rollouts}",
                           "rollout.samples_per_task=1", f"run.output_dir={output_dir / 'recorded'}",
                           f"run.name=replay-{harness}")
    if recorded is None:
        return {"harness": harness, "error": f"recording failed: {err}"}
    run_dir = Path(recorded["run_dir"])
    results = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    eligible = [r for r in results if r["calls"] >= 3]
    print(f"{harness}: recorded {len(results)} rollouts, calls {[r['calls'] for r in results]}; replaying "
          f"{len(eligible)}", file=sys.stderr, flush=True)
    replays = []
    for result in eligible:
        summary, err = _forge("rollout", "--replay", f"{run_dir}/{result['rollout_id']}", f"proxy.upstream={policy}",
                              "proxy.port=0", f"run.output_dir={output_dir / 'replayed'}")
        if summary is None:
            replays.append({"rollout_id": result["rollout_id"], "faithful": False, "error": err})
            continue
        replays.append({k: summary.get(k) for k in ("faithful", "diverged", "not_reached", "live", "status",
                                                    "reward", "prompt_tokens_compared", "prompt_tokens_masked")}
                       | {"rollout_id": result["rollout_id"], "calls": result["calls"],
                          "original": [result["status"], result["reward"]]})
        print(f"  {result['rollout_id']}: {result['calls']} calls, faithful {summary['faithful']}"
              + (f" ({summary['diverged']['message'][:200]})" if summary.get("diverged") else ""),
              file=sys.stderr, flush=True)
    return aggregate({"harness": harness, "recorded": len(results), "calls": [r["calls"] for r in results],
                      "replays": replays, "seconds": round(time.monotonic() - started, 1)})


def aggregate(row: dict[str, Any]) -> dict[str, Any]:
    """A harness's row with its figures computed from its replays."""
    replays = row["replays"]
    faithful = sum(1 for r in replays if r["faithful"])
    lo, hi = wilson_interval(faithful, len(replays)) if replays else (0.0, 1.0)
    compared = sum(r.get("prompt_tokens_compared") or 0 for r in replays)
    masked = sum(r.get("prompt_tokens_masked") or 0 for r in replays)
    return {**row, "n": len(replays), "faithful": faithful, "share": faithful / len(replays) if replays else None,
            "interval": [round(lo, 3), round(hi, 3)], "masked_share": masked / compared if compared else 0.0,
            "same_end": sum(1 for r in replays if r.get("faithful") and [r["status"], r["reward"]] == r["original"])}


def merged(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """``new`` added to ``old`` (--add): more recorded rollouts and replays of the same harness."""
    if old is None or "error" in old or "error" in new:
        return new
    return aggregate({**old, "recorded": old["recorded"] + new["recorded"], "calls": old["calls"] + new["calls"],
                      "replays": old["replays"] + new["replays"], "seconds": old["seconds"] + new["seconds"]})


def render(rows: list[dict[str, Any]]) -> str:
    lines = ["| harness | rollouts (calls) | n (>= 3 calls) | faithful | share [95% CI] | masked | same end |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['harness']} | {row['error'][:80]} | | | | | |")
            continue
        share = "n/a" if row["share"] is None else f"{row['share']:.0%} [{row['interval'][0]:.0%}, " \
                                                  f"{row['interval'][1]:.0%}]"
        lines.append(f"| {row['harness']} | {row['recorded']} ({', '.join(map(str, row['calls']))}) | {row['n']} | "
                     f"{row['faithful']} | {share} | {row['masked_share']:.2%} | {row['same_end']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--harnesses", default=",".join(HARNESSES))
    parser.add_argument("--rollouts", type=int, default=4, help="rollouts recorded per harness (one per task)")
    parser.add_argument("--tool-turns", type=int, default=2, help="first calls answered with a tool call")
    parser.add_argument("--runtime", default="docker")
    parser.add_argument("--output-dir", type=Path, default=Path("/tmp/forge-replay-fidelity"))
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "replay-fidelity.json")
    parser.add_argument("--add", action="store_true", help="record and replay the --harnesses again and add the "
                        "rollouts to their rows (more n)")
    parser.add_argument("--fresh", action="store_true", help="run the --harnesses already in --out again (the "
                        "others' rows are kept)")
    args = parser.parse_args(argv)
    from forge_cli.config.compose import compose
    from forge_cli.serve import start_server
    from forge_cli.testing.tool_relay import ToolRelay

    done: dict[str, Any] = json.loads(args.out.read_text()) if args.out.is_file() else {}
    rows = {r["harness"]: r for r in done.get("rows", [])}
    todo = [h for h in args.harnesses.split(",") if h and (args.fresh or args.add or h not in rows)]
    if todo:
        model = compose([f"model.max_model_len={CONTEXT}", "model.dtype=float32"]).experiment.model
        print(f"starting the policy server at a {CONTEXT}-token context ...", file=sys.stderr, flush=True)
        server = start_server(model, port=0, timeout=900)
        try:
            with ToolRelay(server.url, tool_turns=args.tool_turns) as relay:
                for harness in todo:
                    row = measure(harness, server.url, relay.url, args.rollouts, args.output_dir, args.runtime)
                    rows[harness] = merged(rows.get(harness), row) if args.add else row
                    args.out.parent.mkdir(parents=True, exist_ok=True)
                    ordered = [rows[h] for h in HARNESSES if h in rows] + [r for h, r in rows.items()
                                                                           if h not in HARNESSES]
                    args.out.write_text(json.dumps({"tool_turns": args.tool_turns, "rollouts": args.rollouts,
                                                    "runtime": args.runtime, "rows": ordered}, indent=1) + "\n")
        finally:
            server.stop()
    ordered = [rows[h] for h in HARNESSES if h in rows] + [r for h, r in rows.items() if h not in HARNESSES]
    print(render(ordered))
    return 0


if __name__ == "__main__":
    sys.exit(main())
