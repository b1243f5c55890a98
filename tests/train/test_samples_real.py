"""The sample builder on records of real runs: a real harness's recorded requests replayed through the capture
proxy to the real vLLM (tests/fixtures/harness_requests), and `forge rollout` with forge's react harness in docker
sandboxes. Every sample is checked against the raw records, independently of how the builder works: a merged
sample's token ids are exactly what vLLM returned for its calls, the loss mask covers exactly the sampled tokens,
the logprobs line up one to one, and a harness that rewrites its history yields several segments."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from forge_cli.proxy.launcher import ProxyHandle, start_proxy
from forge_cli.rollout.reader import RunRollout, read_run
from forge_cli.rollout.result import RolloutResult
from forge_cli.traces.record import CallRecord
from forge_cli.traces.store import iter_calls, open_store
from forge_cli.train.sample import Sample
from forge_cli.train.samples import SamplePolicy, build_batch, build_samples
from forge_cli.train.samples_export import read_samples
from tests.helpers import forge
from tests.proxy.conftest import need_mitmdump
from tests.rollout.test_rollout_run import _run

pytestmark = [pytest.mark.vllm, pytest.mark.mitm]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "harness_requests"


def _trainable(call: CallRecord) -> bool:
    lps = call.completion_logprobs
    return (call.status == "ok" and bool(call.prompt_token_ids) and call.completion_token_ids is not None
            and lps is not None and len(lps) == len(call.completion_token_ids) and all(math.isfinite(v) for v in lps))


def expected_segments(calls: list[CallRecord]) -> list[list[CallRecord]]:
    """The trainable calls grouped as the contract says, straight from the records."""
    segments: list[list[CallRecord]] = []
    for call in sorted(calls, key=lambda c: c.seq):
        if not _trainable(call):
            continue
        if segments:
            last = segments[-1][-1]
            history = (last.prompt_token_ids or []) + (last.completion_token_ids or [])
            if (call.prompt_token_ids or [])[:len(history)] == history:
                segments[-1].append(call)
                continue
        segments.append([call])
    return segments


def check_token_exact(calls: list[CallRecord], samples: list[Sample]) -> int:
    """Samples (no length limit) against the records; returns the number of merged calls seen."""
    segments = expected_segments(calls)
    assert len(samples) == len(segments)
    for sample, segment in zip(samples, segments, strict=True):
        first, last = segment[0], segment[-1]
        assert sample.prompt_ids == first.prompt_token_ids
        assert sample.input_ids == (last.prompt_token_ids or []) + (last.completion_token_ids or []), \
            "a merged sample is exactly the concatenation of what vLLM returned"
        mask = [0] * len(sample.response_ids)
        logprobs = [0.0] * len(sample.response_ids)
        for call in segment:
            offset = len(call.prompt_token_ids or []) - len(sample.prompt_ids)
            completion = call.completion_token_ids or []
            assert sample.response_ids[offset:offset + len(completion)] == completion
            mask[offset:offset + len(completion)] = [1] * len(completion)
            logprobs[offset:offset + len(completion)] = call.completion_logprobs or []
        assert sample.loss_mask == mask, "the loss mask covers exactly the sampled tokens"
        assert sample.rollout_logprobs == logprobs, "logprobs line up one to one"
        assert sample.calls == len(segment)
    return sum(len(s) - 1 for s in segments)


# ------------------------------------------------------------------------------------------- recorded requests


@pytest.fixture(scope="module")
def sproxy(policy_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyHandle]:
    need_mitmdump()
    handle = start_proxy(policy_server.url, store=tmp_path_factory.mktemp("sproxy") / "t.sqlite", weight_version="7")
    yield handle
    handle.stop()


def _replay(proxy: ProxyHandle, harness: str, bodies: list[dict[str, Any]]) -> list[CallRecord]:
    info = proxy.register(task=f"{harness}-fixture", harness=harness)
    for body in bodies:
        resp = httpx.post(info["base_url"] + "/v1/chat/completions", json=body, timeout=600,
                          headers={"authorization": f"Bearer {info['key']}"})
        assert resp.status_code == 200, resp.text
    proxy.finish(info["rollout_id"])  # returns once the store writer committed the rollout's calls
    conn = open_store(proxy.store, readonly=True)
    try:
        return list(iter_calls(conn, info["rollout_id"]))
    finally:
        conn.close()


def test_mini_swe_agent_drops_its_answers_so_each_call_is_its_own_segment(sproxy: ProxyHandle,
                                                                          policy_server: Any) -> None:
    """mini-swe-agent's format-error retries (its three recorded requests, as it sent them): each retry resends
    the conversation without the model's answer, plus an error turn. That history is rewritten in token space:
    three segments, never a merge that would train on an answer the harness threw away."""
    fixture = json.loads((FIXTURES / "mini-swe-agent.json").read_text())
    bodies = [{**r["body"], "model": policy_server.model, "max_tokens": 12, "temperature": 0}
              for r in fixture["requests"]]
    calls = _replay(sproxy, "mini-swe-agent", bodies)
    assert [c.status for c in calls] == ["ok"] * 3
    built = build_samples(
        RunRollout(RolloutResult(calls[0].rollout_id, "t", "g", "mini-swe-agent", "ok", reward=1.0), calls),
        max_seq_len=None, policy=SamplePolicy())
    assert check_token_exact(calls, built.samples) == 0
    assert built.decisions == [(0, "first"), (1, "prefix-mismatch"), (2, "prefix-mismatch")]
    assert [s.segment for s in built.samples] == [0, 1, 2]
    assert all(s.weight_versions == ["7"] and s.loss_tokens == len(c.completion_token_ids or [])
               for s, c in zip(built.samples, calls, strict=True))


# ------------------------------------------------------------------------------------------- a real rollout


@pytest.mark.docker
def test_samples_of_a_real_react_run_are_token_exact(tmp_path: Path, policy_server: Any,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """`forge rollout` (react, text tools, docker sandboxes so the model's commands never run here), then the
    builder on its run directory: every sample against the raw records; with a small max_seq_len every sample
    fits and keeps every loss token it can; `forge samples export` writes the same samples with their text (the
    marker docker requires dockerd and the base image)."""
    code, summary, stderr = _run(
        tmp_path, 'harness.command=[python3,"{{bundle}}/bin/forge-react",--max-steps,"3",--tools,text,'
        '"{{instruction}}"]', "runtime=docker", f"proxy.upstream={policy_server.url}", "proxy.port=0",
        "rollout.max_tasks=2", "rollout.samples_per_task=2", "model.max_output_tokens=64")
    assert code == 0, stderr
    run_dir = Path(summary["run_dir"])
    rollouts = list(read_run(run_dir))
    assert len(rollouts) == 4
    batch = build_batch(rollouts, SamplePolicy())
    merged = 0
    for rollout, built in zip(rollouts, batch.rollouts, strict=True):
        assert built.dropped is None and rollout.calls
        merged += check_token_exact(rollout.calls, built.samples)
        assert built.stats.merged == sum(1 for _, reason in built.decisions if reason == "merged")
    assert batch.totals.merged == merged and batch.totals.trainable == sum(len(r.calls) for r in rollouts)

    # half the longest sample: everything fits, every answer (<= 64 tokens) is kept whole, never cut
    longest = max(len(s.input_ids) for s in batch.samples)
    assert longest > 200, "react's first prompt alone is ~200 tokens"
    limit = longest // 2
    short = build_batch(rollouts, SamplePolicy(max_seq_len=limit))
    assert all(len(s.input_ids) <= limit for s in short.samples)
    assert short.totals.truncated_tokens > 0
    answers = {tuple(c.completion_token_ids or []) for r in rollouts for c in r.calls}
    kept = 0
    for sample in short.samples:
        runs, current = [], []
        for token, bit in zip(sample.response_ids, sample.loss_mask, strict=True):
            if bit:
                current.append(token)
            elif current:
                runs.append(current)
                current = []
        runs += [current] if current else []
        kept += sum(len(r) for r in runs)
        assert all(tuple(r) in answers for r in runs), "a run of loss tokens is one whole answer"
    assert short.totals.over_length_calls == 0
    assert kept == short.summary()["loss_tokens"] == batch.summary()["loss_tokens"]

    out = tmp_path / "samples.parquet"
    result = forge("samples", "export", str(run_dir), str(out), "--max-seq-len", "100000")
    assert result.returncode == 0, result.stderr
    rows = read_samples(out)
    assert [(r["rollout_id"], r["prompt_ids"], r["response_ids"], r["loss_mask"], r["rollout_logprobs"])
            for r in rows] == [(s.rollout_id, s.prompt_ids, s.response_ids, s.loss_mask, s.rollout_logprobs)
                               for s in batch.samples]
    from tokenizers import Tokenizer

    from forge_cli.serve.prepare import default_model_dir

    tokenizer = Tokenizer.from_file(str(default_model_dir() / "tokenizer.json"))
    assert rows[0]["response_text"] == tokenizer.decode(rows[0]["response_ids"], skip_special_tokens=False)
    assert "<|im_start|>" in rows[0]["prompt_text"]
    with capsys.disabled():
        print(f"\n[react run] {len(rollouts)} rollouts, {batch.totals.trainable} calls, merged {merged}/"
              f"{batch.totals.transitions}, {len(batch.samples)} samples; max_seq_len {limit}: "
              f"{len(short.samples)} samples ({short.totals.split_segments} segments split), "
              f"{short.totals.truncated_tokens} tokens truncated")
