"""Wire formats are plugins: one defined in a package of its own registers by name (no central list edited), the
proxy routes its path and the store writer assembles its records, and ``forge_cli.testing.wire`` (the kit it runs)
passes it and fails each copy with one planted defect.

The plugin serves Chat Completions requests at a path of its own (``/v1/plain/completions``), reusing the chat
format's functions, as a package adapting a harness's slightly different client would."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forge_cli.proxy.wire import FORMATS, route
from forge_cli.proxy.wire.base import WIRE_FORMATS
from forge_cli.testing.wire import TOOL, check_wire_format
from tests.helpers import install_module, temporary_package

PLUGIN = '''
from forge_cli.proxy.wire import chat
from forge_cli.proxy.wire.base import WireFormat, register_wire_format


def client_body(raw, prep):
    return chat.client_body(raw, prep)


FORMAT = register_wire_format(WireFormat(
    name="plain", paths=("/v1/plain/completions",), prepare=chat.prepare, client_body=client_body,
    client_stream=chat.ClientStream, assemble=chat.assemble, error=chat.openai_error, reshapes_errors=False,
    upstream_answer=chat.upstream_answer))
'''

DEFECTS = {
    "capture fields the client did not ask for reach it": (
        "    return chat.client_body(raw, prep)", "    return raw"),
    "the record keeps one logprob per answer token": (
        "assemble=chat.assemble,", "assemble=lambda raw, streamed, prep: __import__('dataclasses').replace("
        "chat.assemble(raw, streamed, prep), completion_logprobs=None),"),
    "is routed to no format": ('paths=("/v1/plain/completions",)', 'paths=("/v1/plain",)'),
    "prefix replay needs it": ("reshapes_errors=False,\n    upstream_answer=chat.upstream_answer)",
                               "reshapes_errors=False)"),
    "translated back from upstream_answer's is not the recorded one": (
        "upstream_answer=chat.upstream_answer)", "upstream_answer=lambda answer: {**chat.upstream_answer(answer), "
        "'model': 'other'})"),
}


def _request(stream: bool) -> tuple[str, dict[str, Any]]:
    return "/v1/plain/completions", {"model": "m", "stream": stream, "max_tokens": 64,
                                     "messages": [{"role": "user", "content": "hi"}],
                                     "tools": [{"type": "function", "function": TOOL}]}


@pytest.fixture
def plugin(tmp_path: Path) -> Iterator[Path]:
    with temporary_package(tmp_path, "plain_wire") as package:
        yield package
    WIRE_FORMATS.remove("plain")


def test_a_packages_wire_format_is_routed_and_passes_the_kit(plugin: Path) -> None:
    install_module(plugin, "fmt", PLUGIN)
    assert "plain" in FORMATS and route("/v1/plain/completions") is FORMATS["plain"]
    assert route("/v1/chat/completions") is FORMATS["chat"]  # the others still route
    assert check_wire_format("plain", _request) == []


@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_the_kit_fails_a_wire_format_with_one_planted_defect(defect: str, plugin: Path) -> None:
    good, bad = DEFECTS[defect]
    assert good in PLUGIN
    install_module(plugin, "fmt", PLUGIN.replace(good, bad))
    problems = check_wire_format("plain", _request)
    assert problems and any(defect in p for p in problems), problems


def test_after_the_plugin_is_gone_its_path_is_not_routed() -> None:
    assert "plain" not in FORMATS and route("/v1/plain/completions") is None
