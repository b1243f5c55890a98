"""The tool-call formats `benchmarks/tool_call_rate.py` compares (`benchmarks/_tool_formats.py`): each template
renders a first request with its tools and the model's turn open, each parser reads its own format and nothing
else, and a reply counts only as a call naming an offered tool with schema-valid arguments."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import benchmark_module

formats = benchmark_module("_tool_formats")
rate = benchmark_module("tool_call_rate")

BASH = {"type": "function", "function": {"name": "bash", "description": "Run a command", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}
REQUEST = {"task_id": "answer-lookup-3", "messages": [{"role": "system", "content": "You are a coding agent."},
                                                      {"role": "user", "content": "Count the lines of a.txt"}],
           "tools": [BASH]}
REPLIES = {
    "hermes": '<tool_call>\n{"name": "bash", "arguments": {"command": "wc -l a.txt"}}\n</tool_call>',
    "smollm2": '<tool_call>[\n{"name": "bash", "arguments": {"command": "wc -l a.txt"}}\n]</tool_call>',
    "json-list": '[{"name": "bash", "arguments": {"command": "wc -l a.txt"}}]',
}


def _tokenizer() -> Any:
    from transformers import AutoTokenizer

    from forge_cli.config.compose import compose
    from forge_cli.train.loop import model_directory

    return AutoTokenizer.from_pretrained(str(model_directory(compose([]).experiment)))


def test_each_template_renders_the_system_the_tools_and_an_open_assistant_turn() -> None:
    tokenizer = _tokenizer()
    for name, fmt in formats.FORMATS.items():
        text = tokenizer.decode(rate.render(tokenizer, REQUEST, fmt))
        assert text.startswith("<|im_start|>system\nYou are a coding agent.") and text.endswith(
            "<|im_start|>user\nCount the lines of a.txt<|im_end|>\n<|im_start|>assistant\n"), name
        assert '"name": "bash"' in text and '"required": ["command"]' in text, name
    # forge's own template is the served one, unchanged
    served = (formats.REPO / "forge_cli" / "serve" / "chat_template.jinja").read_text()
    assert formats.FORMATS["hermes"].template == served


@pytest.mark.parametrize("name", list(REPLIES))
def test_each_parser_reads_its_own_format_only(name: str) -> None:
    fmt = formats.FORMATS[name]
    assert formats.judge(fmt.parse(REPLIES[name]), [BASH]) == {"call": True, "offered": True, "valid": True}
    for other, reply in REPLIES.items():
        if other != name and not {name, other} <= {"hermes", "smollm2"}:
            assert fmt.parse(reply) is None, (name, other)
    assert fmt.parse("I would run wc -l a.txt to count them.") is None


def test_a_call_counts_only_when_it_names_an_offered_tool_with_valid_arguments() -> None:
    parse = formats.parse_hermes
    assert formats.judge(parse('<tool_call>{"name": "sh", "arguments": {"command": "ls"}}</tool_call>'),
                         [BASH]) == {"call": True, "offered": False, "valid": False}
    for arguments in ('{"cmd": "ls"}', '{"command": 3}', '"ls"'):
        verdict = formats.judge(parse(f'<tool_call>{{"name": "bash", "arguments": {arguments}}}</tool_call>'), [BASH])
        assert verdict == {"call": True, "offered": True, "valid": False}, arguments
    # arguments given as a JSON string (as an API sends them) are parsed first
    assert formats.judge([{"name": "bash", "arguments": '{"command": "ls"}'}], [BASH])["valid"]
    assert formats.judge(None, [BASH]) == {"call": False, "offered": False, "valid": False}


def test_rates_carry_intervals_resampling_templates() -> None:
    yes, no = {"call": True, "offered": True, "valid": True}, {"call": True, "offered": False, "valid": False}
    figures = rate.rates([("a-x-0", yes), ("a-x-1", yes), ("b-y-0", no), ("c-z-0", no)])
    assert figures["replies"] == 4 and figures["call"]["rate"] == 1.0
    assert figures["valid"]["rate"] == 0.5 and 0.0 <= figures["valid"]["low"] <= 0.5 <= figures["valid"]["high"]
