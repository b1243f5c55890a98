"""``forge branch RUN/ROLLOUT --at K -n N``: N continuations of a recorded rollout from the state after its call K.

Each continuation is a replay (``run.run_continuations``): the task again in a fresh sandbox, calls ``0..K-1``
answered from the recording, call K and on sampled live. The original rollout and its continuations form one group
of their own (``branch_group``), apart from the whole-rollout groups of the run it came from: the new run directory
holds the continuations and a copy of the original (its result, regrouped, and its recorded calls), every member
with ``prefix_calls = K``, so the sample builder gives the shared prefix no loss and computes advantages within the
group. ``branch.json`` describes the group.

Where to branch (``--at``): a call number; ``first-failure``, the first call whose prompt carries a failed tool
result (``failed_tool_result``), so the continuations learn what to do after the failure; ``random``, a call
drawn uniformly from 1 to the last (``--seed``).
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

from forge_cli.errors import UserError
from forge_cli.proxy.wire.exchange import chat_request
from forge_cli.replay.run import Say, run_continuations, source_of, split_reference
from forge_cli.replay.script import find_rollout, script
from forge_cli.rollout.reader import RunRollout
from forge_cli.traces.record import CallRecord
from forge_cli.traces.store import call_rows, get_blob, insert_blobs, insert_calls, open_store, row_blob_refs

POINTS = ("first-failure", "random")
# what a failed tool result says, in the words shells, tools and harnesses use (a non-zero exit code or status, a
# shell's error, a Python traceback, an error flag)
FAILED = re.compile(r"(?i)(exit[_ ]?code|exit status|returncode|exited with code)\W{0,3}-?[1-9]\d*"
                    r"|command not found|no such file or directory|permission denied|not a directory"
                    r"|traceback \(most recent call last\)|\"?is_error\"?\W{0,3}true")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(_text(p.get("text") if isinstance(p, dict) else p) for p in content)
    return "" if content is None else str(content)


def tool_results(call: CallRecord) -> list[str]:
    """The tool results a call's prompt added since the model's last answer: the messages after the last
    assistant message (``tool`` messages, or the user turns a text-protocol harness reports results in)."""
    messages = chat_request(call).get("messages") or []
    last = max((i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "assistant"),
               default=None)
    if last is None:
        return []
    return [_text(m.get("content")) for m in messages[last + 1:] if isinstance(m, dict)]


def failed_tool_result(call: CallRecord) -> bool:
    """Does the call's prompt carry a failed tool result (``FAILED``)?"""
    return any(FAILED.search(text) for text in tool_results(call))


def branch_point(original: RunRollout, at: str, seed: int | None) -> int:
    """The call to branch at: a number from 1 to the last call, or one ``POINTS`` chooses; UserError otherwise."""
    calls = sorted(original.calls, key=lambda c: c.seq)
    last = len(calls) - 1
    if last < 1:
        raise UserError(f"rollout {original.result.rollout_id} recorded {len(calls)} call(s): a branch needs a "
                        "recorded call before the one it samples again", exit_code=2)
    if at == "first-failure":
        found = next((c.seq for c in calls[1:] if failed_tool_result(c)), None)
        if found is None:
            raise UserError(f"rollout {original.result.rollout_id}: no call's prompt carries a failed tool result",
                            fix="branch at a call number (--at K) or --at random", exit_code=2)
        return found
    if at == "random":
        return random.Random(seed).randint(1, last)
    if not at.isdigit() or not 1 <= int(at) <= last:
        raise UserError(f"--at {at}: give a call number from 1 to {last}, or one of {', '.join(POINTS)}",
                        exit_code=2)
    return int(at)


def branch_group(rollout_id: str, at: int) -> str:
    """The group id of a rollout's continuations from call ``at``."""
    return f"branch-{rollout_id}-at{at}"


def branch(reference: str, at: str, n: int, overrides: list[str], say: Say, seed: int | None = None
           ) -> dict[str, Any]:
    """Fork ``n`` continuations (module docstring); the summary, also in the new run's ``branch.json``."""
    if n < 1:
        raise UserError(f"-n {n}: fork at least one continuation", exit_code=2)
    run_dir, rollout_id = split_reference(reference)
    original = find_rollout(run_dir, rollout_id)
    k = branch_point(original, at, seed)
    calls = script(original, k)
    group = branch_group(rollout_id, k)
    say(f"branching {rollout_id} at call {k} of {len(original.calls)} ({at}): {n} continuations, "
        f"calls 0-{k - 1} from the recording")
    done = run_continuations(run_dir, original, calls, overrides, say, n=n, group=group)
    _copy_original(run_dir, original, done.run_dir, group, k)
    members = [{"rollout_id": rollout_id, "original": True, "status": original.result.status,
                "reward": original.result.reward, "calls": len(original.calls)}]
    members += [{"rollout_id": r.rollout_id, "original": False, "status": r.status, "reward": r.reward,
                 "calls": r.calls, "prefix_faithful": report["diverged"] is None and not report["not_reached"],
                 "diverged": (report["diverged"] or {}).get("message")}
                for r, report in zip(done.results, done.reports, strict=True)]
    summary = {"source": source_of(run_dir, original), "at": k, "chosen_by": at, "n": n, "group_id": group,
               "run_dir": str(done.run_dir), "members": members}
    (done.run_dir / "branch.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _copy_original(source: Path, original: RunRollout, run_dir: Path, group: str, k: int) -> None:
    """The original rollout into the branch's run: its result (in the branch group, its first ``k`` calls a prefix
    with no loss) and its recorded calls."""
    src = open_store(source / "traces.sqlite", readonly=True)
    dst = open_store(run_dir / "traces.sqlite")
    try:
        after = 0
        while True:
            rows, cursor = call_rows(src, original.result.rollout_id, after)
            insert_calls(dst, rows)
            blobs = {d: found for d in row_blob_refs(rows) if (found := get_blob(src, d)) is not None}
            insert_blobs(dst, blobs)
            if cursor is None:
                break
            after = cursor
        dst.commit()
    finally:
        src.close()
        dst.close()
    result = {**original.result.to_dict(), "group_id": group, "prefix_calls": k}
    with (run_dir / "results.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps(result) + "\n")
