"""SFT samples in the student's tokens (`forge_cli/train/sft.py`) from a real harness's records of a teacher: pi,
through forge's capture proxy, answered by the teacher stand-in (`benchmarks/teacher_standin.py`). The rendered
prompt ids equal the `prompt_token_ids` the student's real vLLM returns for the same forwarded request; the loss
mask covers exactly the teacher's answers in the student's tool-call format; extending calls merge."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from forge_cli.paths import forge_home
from forge_cli.rollout.reader import read_run
from forge_cli.train.sft import SftError, _chat_request, load_student_tokenizer, render_call, sft_sequences
from tests.envs.test_teacher_standin import standin
from tests.helpers import REPO

pytestmark = [pytest.mark.mitm, pytest.mark.requires("harness:pi")]


def teacher_rollout(tmp: Path, harness: str, task_ids: str) -> Path:
    """``harness`` on the builtin train tasks ``task_ids`` (``[a,b]``) against the stand-in, through the proxy (local
    sandbox); the run directory."""
    home = tmp / "home"
    home.mkdir()
    for shared in ("envs", "models", "harnesses"):
        (home / shared).symlink_to(forge_home() / shared)
    with standin.TeacherServer(standin.builtin_teacher()) as server:
        done = subprocess.run(
            [sys.executable, "-m", "forge_cli", "rollout", "--json", f"+harness={harness}", "runtime=local",
             f"proxy.upstream={server.base_url.removesuffix('/v1')}", "proxy.port=0", "env.split=train",
             f"env.task_ids={task_ids}", "rollout.samples_per_task=1", f"run.output_dir={tmp / 'runs'}"],
            capture_output=True, text=True, cwd=REPO, timeout=900,
            env={**os.environ, "COLUMNS": "200", "FORGE_HOME": str(home)}, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return Path(json.loads(done.stdout)["run_dir"])


@pytest.fixture(scope="module")
def teacher_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pi on 3 builtin train tasks against the stand-in, through the proxy (local sandbox, ~10 s)."""
    return teacher_rollout(tmp_path_factory.mktemp("teacher-run"), "pi",
                           "[create-edit-append-line-0,search-count-count-lines-0,json-csv-json-field-0]")


def _spans(input_ids: list[int], mask: list[int]) -> list[list[int]]:
    """The runs of loss tokens."""
    spans: list[list[int]] = []
    current: list[int] = []
    for token, loss in zip(input_ids, mask, strict=True):
        if loss:
            current.append(token)
        elif current:
            spans.append(current)
            current = []
    return [*spans, current] if current else spans


@pytest.mark.vllm
def test_rendered_prompt_ids_equal_vllms_and_the_loss_covers_exactly_the_answers(
        teacher_run: Path, policy_server: Any) -> None:
    from forge_cli.serve.prepare import default_model_dir

    tokenizer = load_student_tokenizer(default_model_dir())
    rollouts = list(read_run(teacher_run))
    assert len(rollouts) == 3 and all(r.result.reward == 1 for r in rollouts)
    with httpx.Client(base_url=policy_server.base_url, timeout=600) as client:
        for rollout in rollouts:
            for call in rollout.calls:
                body = {k: v for k, v in _chat_request(call).items() if k not in ("stream", "stream_options")}
                served = client.post("/chat/completions", json={
                    **body, "model": policy_server.model, "max_tokens": 1, "return_token_ids": True}).json()
                prompt, _ = render_call(tokenizer, call)
                assert prompt == served["prompt_token_ids"], (rollout.result.task_id, call.seq)
            (sequence,) = sft_sequences(rollout.result.rollout_id, rollout.result.task_id, rollout.result.reward,
                                        rollout.calls, tokenizer)
            assert sequence.calls == len(rollout.calls) == 2, "the final answer's prompt extends the tool call's"
            expected = []
            for call in rollout.calls:
                message = call.response["choices"][0]["message"]  # type: ignore[index]
                if message.get("tool_calls"):
                    function = message["tool_calls"][0]["function"]
                    arguments = json.dumps(json.loads(function["arguments"]), ensure_ascii=False)
                    expected.append(f'<tool_call>\n{{"name": "{function["name"]}", "arguments": {arguments}}}\n'
                                    f"</tool_call><|im_end|>")
                else:
                    expected.append(f"{message['content']}<|im_end|>")
            spans = [tokenizer.decode(s) for s in _spans(sequence.input_ids, sequence.loss_mask)]  # type: ignore[attr-defined]
            assert spans == expected


def test_an_answer_its_wire_format_cannot_turn_back_is_refused_with_the_reason(teacher_run: Path) -> None:
    from forge_cli.serve.prepare import default_model_dir

    call = next(iter(read_run(teacher_run))).calls[0]
    other = dataclasses.replace(call, wire_format="responses")  # a Chat answer is no Responses answer
    with pytest.raises(SftError) as raised:
        render_call(load_student_tokenizer(default_model_dir()), other)
    assert "(responses) cannot become an SFT sample" in raised.value.message and raised.value.exit_code == 2
    assert "not a finished Responses response" in raised.value.message


def test_samples_export_sft_writes_the_kept_rollouts_sequences(teacher_run: Path, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from tests.helpers import forge

    out = tmp_path / "sft.parquet"
    done = forge("samples", "export", "--sft", "--json", str(teacher_run), str(out))
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["kept"] == summary["rollouts"] == 3 and summary["sequences"] == 3 and summary["calls"] == 6
    rows = pq.read_table(out).to_pylist()
    assert [sum(r["loss_mask"]) for r in rows] == [r["loss_tokens"] for r in rows]
    assert all(r["reward"] == 1 for r in rows)
    assert all(len(r["input_ids"]) == len(r["loss_mask"]) for r in rows)
    none = forge("samples", "export", "--sft", "--json", "--min-reward", "1.5", str(teacher_run), str(out))
    assert none.returncode == 0 and json.loads(none.stdout)["kept"] == 0
    refused = forge("samples", "export", "--sft", "--format", "hf", str(teacher_run), str(tmp_path / "ds"))
    assert refused.returncode == 2 and "Parquet only" in refused.stderr and "Traceback" not in refused.stderr
