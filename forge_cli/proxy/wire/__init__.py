"""Wire formats the proxy serves: OpenAI Chat Completions, OpenAI Responses, Anthropic Messages, Gemini API.

Each format is one module ending in its ``FORMAT`` (a ``WireFormat``, the interface documented in ``base.py``),
registered in ``registry.FORMATS``: rewrite the client's request for the upstream, turn upstream bytes into what
the client sees (JSON or SSE, event by event), assemble the complete response plus token ids and logprobs for the
record. The translated formats read the upstream's stream through one decoder (``decode.ChatStreamDecoder``).
"""

from __future__ import annotations

from forge_cli.proxy.wire.registry import FORMATS, format_for_path, route

__all__ = ["FORMATS", "format_for_path", "route"]
