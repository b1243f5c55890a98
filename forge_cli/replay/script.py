"""What a replay answers: a recorded rollout's calls, each with the Chat Completions answer it was given.

A call's *lane* is the set of tool names its request offered (``lane``): a harness's main loop offers its tools on
every call, its side calls (titles, summaries, next-speaker checks) offer none or others. Calls are matched in
the rollout's own order within their lane, so side calls that race the main loop still find their recording.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forge_cli.errors import UserError
from forge_cli.proxy.wire.exchange import NoExchange, chat_answer, chat_request
from forge_cli.rollout.reader import RunRollout, read_run
from forge_cli.traces.record import CallRecord

Lane = tuple[str, ...]


def lane(chat_request: Any) -> Lane:
    """A Chat Completions request's lane: the sorted names of the tools it offers."""
    tools = chat_request.get("tools") if isinstance(chat_request, dict) else None
    names = [str((t.get("function") or {}).get("name") or t.get("name") or "") for t in tools or ()
             if isinstance(t, dict)]
    return tuple(sorted(names))


@dataclass(frozen=True, slots=True)
class Recorded:
    """One recorded call as a replay serves it."""

    seq: int
    lane: Lane
    wire_format: str
    prompt_token_ids: list[int] | None
    completion_token_ids: list[int]
    completion_logprobs: list[float]
    answer: dict[str, Any]  # the Chat Completions answer (no capture fields): what the upstream said

    def completion(self, prompt_ids: list[int] | None, token: Any = None) -> dict[str, Any]:
        """The upstream's whole answer again, capture fields and usage included; ``token`` (id -> text) spells the
        logprob entries (else they carry no text)."""
        answer = {**self.answer, "choices": [dict(c) for c in self.answer["choices"]]}
        choice = answer["choices"][0]
        choice["token_ids"] = list(self.completion_token_ids)
        choice["logprobs"] = {"content": [
            {"token": token(t) if token else "", "logprob": lp if math.isfinite(lp) else None, "bytes": None,
             "top_logprobs": []} for t, lp in zip(self.completion_token_ids, self.completion_logprobs, strict=False)]}
        prompt = len(prompt_ids or ())
        answer["prompt_token_ids"] = prompt_ids
        answer["usage"] = {"prompt_tokens": prompt, "completion_tokens": len(self.completion_token_ids),
                           "total_tokens": prompt + len(self.completion_token_ids)}
        return answer


def recorded(record: CallRecord) -> Recorded:
    """``record`` as a replay serves it; UserError when it cannot be (failed, no token ids, a format without an
    inverse translation)."""
    where = f"call {record.seq} of rollout {record.rollout_id}"
    if record.status != "ok":
        raise UserError(f"{where} did not succeed ({record.status}: {record.error}); a replay can only answer "
                        "calls that were answered", fix="replay up to the call before it: --until "
                        f"{record.seq}", exit_code=2)
    if record.completion_token_ids is None:
        raise UserError(f"{where} has no token ids (its upstream returned none, e.g. an external API); a replay "
                        "checks prompts token for token", exit_code=2)
    try:
        answer = chat_answer(record)
    except NoExchange as exc:
        raise UserError(f"{where} cannot be replayed: {exc}", exit_code=2) from None
    if record.finish_reason:  # the upstream's own, where a format's answer folds several into one
        answer["choices"][0]["finish_reason"] = record.finish_reason
    return Recorded(seq=record.seq, lane=lane(chat_request(record)), wire_format=record.wire_format,
                    prompt_token_ids=record.prompt_token_ids, completion_token_ids=record.completion_token_ids,
                    completion_logprobs=list(record.completion_logprobs or [0.0] * len(record.completion_token_ids)),
                    answer=answer)


def find_rollout(run_dir: Path, rollout_id: str) -> RunRollout:
    """The rollout ``rollout_id`` of ``run_dir`` with its calls (its last attempt), or UserError."""
    found = [r for r in read_run(run_dir) if r.result.rollout_id == rollout_id]
    if not found:
        raise UserError(f"no rollout {rollout_id!r} in {run_dir}/results.jsonl",
                        fix=f"the ids are in {run_dir}/results.jsonl (or: forge traces ls --store "
                            f"{run_dir}/traces.sqlite)", exit_code=2)
    return found[-1]


def script(rollout: RunRollout, until: int | None) -> list[Recorded]:
    """The calls a replay answers: those with ``seq < until`` (all when None), each checked to be replayable."""
    calls = sorted(rollout.calls, key=lambda c: c.seq)
    if not calls:
        raise UserError(f"rollout {rollout.result.rollout_id} recorded no model call: there is nothing to replay",
                        exit_code=2)
    if until is not None and not 0 <= until <= len(calls):
        raise UserError(f"--until {until}: rollout {rollout.result.rollout_id} recorded {len(calls)} calls",
                        fix=f"pass a number from 0 to {len(calls)}", exit_code=2)
    return [recorded(c) for c in calls if until is None or c.seq < until]
