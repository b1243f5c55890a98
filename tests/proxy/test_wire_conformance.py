"""Wire conformance: every registered ``WireFormat`` (``wire.FORMATS``) does the same things the same way, through the
registry alone: requests with tools become capture-enabled Chat Completions requests, answers (JSON and streams,
text and tool calls) reach the client in its format and the record keeps every token id with one logprob each,
errors come in the format's shape, broken requests and streams are refused or ended in error. The checks are
forge_cli.testing.wire's (the kit a format in its own package runs); this file gives each format's request."""

from __future__ import annotations

from typing import Any

import pytest

from forge_cli.proxy.wire import FORMATS
from forge_cli.testing.wire import CHECKS, TOOL, run_check


def _request(name: str, stream: bool) -> tuple[str, dict[str, Any]]:
    """(client path, body) of a call with one user turn, one tool and an output limit, in the format's terms."""
    if name == "chat":
        return "/v1/chat/completions", {"model": "m", "stream": stream, "max_tokens": 64,
                                        "messages": [{"role": "user", "content": "hi"}],
                                        "tools": [{"type": "function", "function": TOOL}]}
    if name == "responses":
        return "/v1/responses", {"model": "m", "stream": stream, "max_output_tokens": 64, "input": "hi",
                                 "tools": [{"type": "function", **TOOL}]}
    if name == "anthropic":
        return "/v1/messages", {"model": "m", "stream": stream, "max_tokens": 64,
                                "messages": [{"role": "user", "content": "hi"}],
                                "tools": [{"name": TOOL["name"], "description": TOOL["description"],
                                           "input_schema": TOOL["parameters"]}]}
    assert name == "gemini"
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    return f"/v1beta/models/m:{method}", {"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
                                          "generationConfig": {"maxOutputTokens": 64},
                                          "tools": [{"functionDeclarations": [TOOL]}]}


FORMAT_NAMES = sorted(FORMATS)


def test_registry_names_every_format() -> None:
    assert FORMAT_NAMES == ["anthropic", "chat", "gemini", "responses"]
    assert all(name == fmt.name for name, fmt in FORMATS.items())


@pytest.mark.parametrize("name", FORMAT_NAMES)
@pytest.mark.parametrize("check", list(CHECKS))
def test_conformance(check: str, name: str) -> None:
    """One check of forge_cli.testing.wire (the kit a wire format in its own package runs) on this format."""
    problem = run_check(check, name, lambda stream: _request(name, stream))
    assert problem is None, problem
