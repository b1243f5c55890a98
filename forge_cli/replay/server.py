"""The replay upstream: between the capture proxy and the policy server, it answers a replayed rollout's calls from
its recording and sends every other call on to the policy server.

The proxy names each call's rollout in the ``x-forge-rollout`` header (``start_proxy(rollout_header=True)``). For a
rollout given a script (``expect``), a call is matched to the first recorded call of its lane not yet answered
(``script.lane``; another of the lane whose prompt is equal when calls raced). Its prompt ids are asked of the
policy server's ``/tokenize`` (the same chat template and tools rendering as its chat endpoint, no sampling) and
compared with the recorded ids (``compare``). Equal: the recorded answer is returned, streamed when the request
streams, with the recorded token ids and logprobs. Different: the replay has diverged; this call and every later
one of the rollout are refused with HTTP 422 and a message starting ``forge replay diverged`` (the rollout ends
``infra_error``: ``rollout.result.ending_status``). A call of a lane whose recording is used up goes to the policy
server: from there on the policy samples live.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from re import Pattern
from typing import Any

import httpx

from forge_cli.replay.compare import Comparison, Decode, compare
from forge_cli.replay.script import Lane, Recorded, lane
from forge_cli.rollout.result import REPLAY_DIVERGED as DIVERGED
from forge_cli.serve.relay import JSONHandler, LocalServer

HEADER = "x-forge-rollout"
TIMEOUT_S = 900.0


@dataclass
class RolloutReplay:
    """One rollout's script and what happened to it."""

    pending: dict[Lane, list[Recorded]]
    total: int
    replayed: list[dict[str, Any]] = field(default_factory=list)
    live: list[dict[str, Any]] = field(default_factory=list)
    diverged: dict[str, Any] | None = None
    calls: int = 0  # calls seen, in arrival order

    def report(self) -> dict[str, Any]:
        """What the replay did: calls answered from the recording, calls sampled live, the divergence (if any),
        whether every recorded call was answered with its prompt unchanged, and the tokens masked."""
        tokens = sum(r["tokens"] for r in self.replayed)
        masked = sum(r["masked"] for r in self.replayed)
        left = sorted(r.seq for calls in self.pending.values() for r in calls)
        return {"script_calls": self.total, "replayed": self.replayed, "live": self.live, "diverged": self.diverged,
                "not_reached": left, "faithful": self.diverged is None and not left,
                "prompt_tokens_compared": tokens, "prompt_tokens_masked": masked,
                "masked_share": round(masked / tokens, 6) if tokens else 0.0}


class ReplayUpstream(LocalServer):
    """The server on 127.0.0.1 in a thread: ``with ReplayUpstream(policy_url, decode) as replay: replay.url``."""

    def __init__(self, upstream: str, decode: Decode | None, volatile: Sequence[Pattern[str]] = (),
                 port: int = 0) -> None:
        self.upstream = upstream.rstrip("/").removesuffix("/v1")
        self.decode = decode
        self.volatile = list(volatile)
        self.rollouts: dict[str, RolloutReplay] = {}
        self.lock = threading.Lock()
        self.client = httpx.Client(timeout=TIMEOUT_S)
        super().__init__(type("Handler", (_Handler,), {"replay": self}), port, "forge-replay")

    def close(self) -> None:
        self.client.close()

    def expect(self, rollout_id: str, script: list[Recorded]) -> None:
        """Answer ``rollout_id``'s calls from ``script`` (see the module docstring)."""
        pending: dict[Lane, list[Recorded]] = {}
        for call in sorted(script, key=lambda c: c.seq):
            pending.setdefault(call.lane, []).append(call)
        with self.lock:
            self.rollouts[rollout_id] = RolloutReplay(pending=pending, total=len(script))

    def report(self, rollout_id: str) -> dict[str, Any]:
        with self.lock:
            return self.rollouts[rollout_id].report()

    # -- one call ------------------------------------------------------------------------------------
    def answer(self, rollout_id: str | None, body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        """The recorded answer (200) or the divergence (422) for a call; None: send it to the policy server."""
        state = self.rollouts.get(rollout_id or "")
        if state is None:
            return None
        with self.lock:
            n = state.calls
            state.calls += 1
            if state.diverged is not None:
                return 422, _error(state.diverged["message"])
            candidates = list(state.pending.get(lane(body)) or ())
            if not candidates:
                state.live.append({"call": n, "lane": list(lane(body))})
                return None
        live_ids = self.tokenize(body)
        decode = self.decode
        token = (lambda t: decode([t])) if decode is not None else None
        first: Comparison | None = None
        for candidate in candidates:
            found = compare(candidate.prompt_token_ids or [], live_ids, self.decode, self.volatile)
            first = first or found
            if not found.equal:
                continue
            with self.lock:
                waiting = state.pending.get(candidate.lane, [])
                if candidate not in waiting:  # a call that raced this one was answered with it
                    continue
                waiting.remove(candidate)
                state.replayed.append({"call": n, "seq": candidate.seq, "tokens": found.tokens,
                                       "masked": found.masked,
                                       "completion_tokens": len(candidate.completion_token_ids)})
            return 200, candidate.completion(live_ids, token)
        assert first is not None
        expected = candidates[0]
        message = (f"{DIVERGED} at call {n} (recorded call {expected.seq}): {first.describe()}")
        with self.lock:
            state.diverged = {"call": n, "seq": expected.seq, "at_token": first.at, "tokens": first.tokens,
                              "recorded": first.recorded, "live": first.live, "message": message}
        return 422, _error(message)

    def tokenize(self, body: dict[str, Any]) -> list[int]:
        """The prompt ids the policy server renders for a chat request (``/tokenize``: no sampling)."""
        request = {"model": body.get("model"), "messages": body.get("messages") or [], "add_generation_prompt": True}
        for key in ("tools", "chat_template_kwargs", "add_generation_prompt", "continue_final_message",
                    "chat_template"):
            if body.get(key) is not None:
                request[key] = body[key]
        answer = self.client.post(f"{self.upstream}/tokenize", json=request)
        answer.raise_for_status()
        return [int(t) for t in answer.json()["tokens"]]


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "replay_diverged", "param": None, "code": 422}}


def stream_events(full: dict[str, Any], include_usage: bool) -> list[bytes]:
    """A whole answer as the policy server streams it: one chunk with the message and capture fields, one with the
    finish reason, the usage when asked for, then ``[DONE]``."""
    base = {"id": full.get("id"), "object": "chat.completion.chunk", "created": full.get("created"),
            "model": full.get("model")}
    choice = full["choices"][0]
    message = choice["message"]
    delta: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
    if message.get("reasoning_content"):
        delta["reasoning_content"] = message["reasoning_content"]
    if message.get("tool_calls"):
        delta["tool_calls"] = [dict(call, index=i) for i, call in enumerate(message["tool_calls"])]
    first = {**base, "prompt_token_ids": full.get("prompt_token_ids"),
             "choices": [{"index": 0, "delta": delta, "token_ids": choice.get("token_ids"),
                          "logprobs": choice.get("logprobs"), "finish_reason": None}]}
    chunks = [first, {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": choice.get("finish_reason")}]}]
    if include_usage:
        chunks.append({**base, "choices": [], "usage": full.get("usage")})
    return [b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks] + [b"data: [DONE]\n\n"]


class _Handler(JSONHandler):
    replay: ReplayUpstream

    def do_GET(self) -> None:
        self.pass_through(self.replay.client, self.replay.upstream, None)

    def do_POST(self) -> None:
        raw = self.read_body()
        body: Any = None
        if self.path.rstrip("/").endswith("/chat/completions"):
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = None
        try:
            answered = self.replay.answer(self.headers.get(HEADER), body) if isinstance(body, dict) else None
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            self.send_json(502, _error(f"forge replay: the policy server did not tokenize the prompt: {exc}"))
            return
        if answered is None:
            self.pass_through(self.replay.client, self.replay.upstream, raw)
            return
        assert isinstance(body, dict)
        status, payload = answered
        if status != 200 or not body.get("stream"):
            self.send_json(status, payload)
            return
        self.send_events(stream_events(payload, bool((body.get("stream_options") or {}).get("include_usage"))))
