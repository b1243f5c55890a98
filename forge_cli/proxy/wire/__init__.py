"""Wire formats the proxy serves: OpenAI Chat Completions, OpenAI Responses, Anthropic Messages.

Each format module offers the same small interface (see ``WireFormat``): rewrite the client's request
for the upstream, turn upstream bytes into what the client sees (JSON or SSE, event by event), and
assemble the complete response plus token ids and logprobs for the record.
"""

from __future__ import annotations

from typing import Literal

Format = Literal["chat", "responses", "anthropic"]

# upstream path each client path is served from (Responses and Anthropic Messages by translation to Chat
# Completions: vLLM's own endpoints for them give no token ids or not a logprob for every token)
_ROUTES: dict[str, tuple[Format, str]] = {
    "/v1/chat/completions": ("chat", "/v1/chat/completions"),
    "/chat/completions": ("chat", "/v1/chat/completions"),
    "/v1/responses": ("responses", "/v1/chat/completions"),
    "/responses": ("responses", "/v1/chat/completions"),
    "/v1/messages": ("anthropic", "/v1/chat/completions"),
    "/messages": ("anthropic", "/v1/chat/completions"),
}


def route(path: str) -> tuple[Format, str] | None:
    """(wire format, upstream path) for a client path after the ``/r/<id>`` prefix, query dropped."""
    return _ROUTES.get(path.split("?", 1)[0].rstrip("/"))


def format_for_path(path: str) -> Format:
    """Best guess of the wire format for error shapes, even for paths that are not served."""
    return "anthropic" if "/messages" in path else "chat"
