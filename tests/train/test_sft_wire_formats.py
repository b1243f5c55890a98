"""SFT samples from harnesses that do not speak Chat Completions: Codex (OpenAI Responses) and Claude Code (Anthropic
Messages), each run for real through forge's capture proxy against the teacher stand-in. The proxy forwards their
calls upstream as Chat Completions; the samples render that forwarded request with the student's chat template and
the record's answer turned back into the Chat Completions answer it was translated from
(`forge_cli/proxy/wire/exchange.py`). The rendered prompt ids equal the `prompt_token_ids` the student's real vLLM
returns for the same forwarded request, and the loss covers exactly the teacher's answers in the student's
tool-call format. Part of `make test-e2e` (the bundles come with `scripts/setup.sh harnesses`); ~1 min per harness
besides the 32k-context server's start."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from forge_cli.rollout.reader import read_run
from forge_cli.train.sft import _answer, _chat_request, load_student_tokenizer, render_call, sft_sequences
from tests.train.test_sft_samples import _spans, teacher_rollout

pytestmark = [pytest.mark.e2e, pytest.mark.mitm, pytest.mark.vllm]

TASKS = "[create-edit-append-line-0,search-count-count-lines-0]"


def _expected_span(message: dict[str, Any]) -> str:
    """The assistant turn in the default student's hermes format, up to its end-of-turn token."""
    parts = [message["content"]] if message.get("content") else []
    for call in message.get("tool_calls") or []:
        function = call["function"]
        arguments = json.dumps(json.loads(function["arguments"]), ensure_ascii=False)
        parts.append(f'<tool_call>\n{{"name": "{function["name"]}", "arguments": {arguments}}}\n</tool_call>')
    return "\n".join(parts) + "<|im_end|>"


@pytest.mark.parametrize(("harness", "wire"), [
    pytest.param("codex", "responses", marks=pytest.mark.requires("harness:codex")),
    pytest.param("claude-code", "anthropic", marks=pytest.mark.requires("harness:claude-code"))])
def test_non_chat_records_render_to_vllms_prompt_ids_and_the_teachers_answers(
        harness: str, wire: str, tmp_path: Path, long_context_server: Any) -> None:
    from forge_cli.serve.prepare import default_model_dir

    tokenizer = load_student_tokenizer(default_model_dir())
    rollouts = list(read_run(teacher_rollout(tmp_path, harness, TASKS)))
    assert len(rollouts) == 2 and all(r.result.reward == 1 for r in rollouts)
    server = long_context_server
    with httpx.Client(base_url=server.base_url, timeout=600) as client:
        for rollout in rollouts:
            assert {c.wire_format for c in rollout.calls} == {wire}
            answered = [c for c in rollout.calls if c.status == "ok"]
            assert len(answered) >= 2, "a tool call running the reference solution, then the final answer"
            for call in answered:
                body = {k: v for k, v in _chat_request(call).items() if k not in ("stream", "stream_options")}
                served = client.post("/chat/completions", json={
                    **body, "model": server.model, "max_tokens": 1, "return_token_ids": True}).json()
                prompt, _ = render_call(tokenizer, call)
                assert prompt == served["prompt_token_ids"], (rollout.result.task_id, call.seq)
            sequences = sft_sequences(rollout.result.rollout_id, rollout.result.task_id, rollout.result.reward,
                                      rollout.calls, tokenizer)
            assert sum(s.calls for s in sequences) == len(answered)
            spans = [tokenizer.decode(span)  # type: ignore[attr-defined]
                     for s in sequences for span in _spans(s.input_ids, s.loss_mask)]
            assert spans == [_expected_span(_answer(c)) for c in answered]
            assert any(_answer(c).get("tool_calls") for c in answered), "the teacher's tool call is trained on"
