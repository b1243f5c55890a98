"""`forge_cli/train/vllm_render.py`: messages as vLLM hands them to a chat template (the rules the e2e tests pin to
vLLM's real `prompt_token_ids` on pi, Codex and Claude Code records, here one by one)."""

from __future__ import annotations

import pytest

from forge_cli.errors import UserError
from forge_cli.train.vllm_render import as_vllm_renders

STRING_TEMPLATE = "{% for message in messages %}{{ message.content }}{% endfor %}"
PARTS_TEMPLATE = "{% for message in messages %}{% for part in message['content'] %}{{ part.text }}{% endfor %}" \
                 "{% endfor %}"


def test_text_parts_and_none_become_one_string_joined_by_newlines() -> None:
    out = as_vllm_renders([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "input_text",
                                                                                       "text": "b"}, "c"]},
                           {"role": "assistant", "content": None}], STRING_TEMPLATE, "here")
    assert [m["content"] for m in out] == ["a\nb\nc", ""]


def test_a_template_looping_over_content_gets_text_parts_but_tool_results_stay_strings() -> None:
    out = as_vllm_renders([{"role": "user", "content": "a"},
                           {"role": "tool", "tool_call_id": "1", "content": [{"type": "text", "text": "x"},
                                                                             {"type": "text", "text": "y"}]}],
                          PARTS_TEMPLATE, "here")
    assert out[0]["content"] == [{"type": "text", "text": "a"}] and out[1]["content"] == "x\ny"


def test_developer_messages_become_one_system_message_at_the_front_unless_the_template_knows_the_role() -> None:
    messages = [{"role": "system", "content": "s"}, {"role": "developer", "content": [{"type": "text", "text": "d"}],
                                                     "tools": []},
                {"role": "user", "content": "u"}, {"role": "developer", "content": "e"}]
    out = as_vllm_renders(messages, STRING_TEMPLATE, "here")
    assert out == [{"role": "system", "content": "s\n\nd\n\ne"}, {"role": "user", "content": "u"}]
    known = as_vllm_renders(messages, STRING_TEMPLATE + "{# 'developer' #}", "here")
    assert [m["role"] for m in known] == ["system", "developer", "user", "developer"]
    alone = as_vllm_renders([{"role": "developer", "content": "d"}, {"role": "user", "content": "u"}],
                            STRING_TEMPLATE, "here")
    assert alone == [{"role": "system", "content": "d"}, {"role": "user", "content": "u"}]


def test_claude_codes_billing_header_line_is_dropped_from_system_texts_only() -> None:
    header = "x-anthropic-billing-header: cc_version=2; cch=abc"
    out = as_vllm_renders([{"role": "system", "content": [{"type": "text", "text": header},
                                                          {"type": "text", "text": header + "\nkeep"}]},
                           {"role": "user", "content": header}], STRING_TEMPLATE, "here")
    assert out[0]["content"] == "keep" and out[1]["content"] == header


def test_arguments_are_parsed_and_reasoning_is_also_reasoning_content() -> None:
    (out,) = as_vllm_renders([{"role": "assistant", "content": "", "reasoning": "r", "tool_calls": [
        {"id": "1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]}],
        STRING_TEMPLATE, "here")
    assert out["tool_calls"][0]["function"]["arguments"] == {"command": "ls"} and out["reasoning_content"] == "r"


def test_a_media_part_is_refused_with_exit_2() -> None:
    with pytest.raises(UserError) as raised:
        as_vllm_renders([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
                        STRING_TEMPLATE, "call 0 of rollout r")
    assert raised.value.exit_code == 2 and "image_url" in raised.value.message
