"""Wire formats the proxy serves: OpenAI Chat Completions, OpenAI Responses, Anthropic Messages, Gemini API.

Each format module offers the same small interface (see ``WireFormat``): rewrite the client's request
for the upstream, turn upstream bytes into what the client sees (JSON or SSE, event by event), and
assemble the complete response plus token ids and logprobs for the record.
"""

from __future__ import annotations

import re
from typing import Literal

Format = Literal["chat", "responses", "anthropic", "gemini"]

# Gemini API model calls: the model and the method are in the path (/v1beta/models/<model>:<method>)
GEMINI_PATH = re.compile(r"^/(?:v1beta|v1|v1alpha)/models/([^/:]+):(generateContent|streamGenerateContent)$")

# upstream path each client path is served from (Responses, Anthropic Messages and Gemini by translation to
# Chat Completions: vLLM's own endpoints for them give no token ids or not a logprob for every token)
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
    route_path = path.split("?", 1)[0].rstrip("/")
    found = _ROUTES.get(route_path)
    if found is None and ":" in route_path and GEMINI_PATH.match(route_path):
        return "gemini", "/v1/chat/completions"
    return found


def format_for_path(path: str) -> Format:
    """Best guess of the wire format for error shapes, even for paths that are not served."""
    if "/messages" in path:
        return "anthropic"
    route_path = path.split("?", 1)[0]
    return "gemini" if "/v1beta/" in route_path or ("/models/" in route_path and ":" in route_path) else "chat"
