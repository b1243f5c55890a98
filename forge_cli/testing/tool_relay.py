"""A relay between the capture proxy and vLLM that makes the 135M model call tools: a request that offers tools and
carries fewer than ``tool_turns`` tool results gets ``tool_choice: required``, so vLLM's structured output answers
with a call of one of the harness's tools; with
``first_reply``, a rollout's first call (no assistant turn yet) is answered with exactly that text (vLLM's
``structured_outputs.choice``); everything else passes unchanged, streamed answers included. (A
plumbing stand-in for a student that calls tools, which forge cannot ship: no such checkpoint is in the
repository.) It is for tests and benchmarks of the plumbing (replay, merging, samples), never for an evaluation:
the answers it forces are not the policy's choices.

    with ToolRelay(policy_server.url, tool_turns=2) as relay:
        ... proxy.upstream=relay.url ...
        relay.forced  # calls it forced
"""

from __future__ import annotations

import json
import threading

import httpx

from forge_cli.serve.relay import JSONHandler, LocalServer


class _Handler(JSONHandler):
    relay: ToolRelay

    def do_GET(self) -> None:
        self.pass_through(self.relay.client, self.relay.upstream, None)

    def do_POST(self) -> None:
        body = self.read_body()
        if self.path.endswith("/chat/completions"):
            request = json.loads(body)
            results = sum(m.get("role") == "tool" for m in request.get("messages", []))
            first = not any(m.get("role") == "assistant" for m in request.get("messages", []))
            forced = False
            if self.relay.first_reply is not None and first:
                request["structured_outputs"] = {"choice": [self.relay.first_reply]}
                forced = True
            if request.get("tools") and results < self.relay.tool_turns:
                request["tool_choice"] = "required"
                forced = True
            if forced:
                with self.relay.lock:
                    self.relay.forced += 1
                body = json.dumps(request).encode()
        self.pass_through(self.relay.client, self.relay.upstream, body)


class ToolRelay(LocalServer):
    """The relay on 127.0.0.1 in a thread (module docstring)."""

    def __init__(self, upstream: str, tool_turns: int = 1, first_reply: str | None = None) -> None:
        self.upstream = upstream.rstrip("/")
        self.first_reply = first_reply
        self.tool_turns = tool_turns
        self.forced = 0
        self.lock = threading.Lock()
        self.client = httpx.Client(timeout=900)
        super().__init__(type("Relay", (_Handler,), {"relay": self}))

    def close(self) -> None:
        self.client.close()
