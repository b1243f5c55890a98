"""The sample builder on hand-made records: merging, masks, logprobs, skipped calls, truncation and splits, the
rollout and group rules, advantages, merge stats. Every value is pinned."""

from __future__ import annotations

import math

import pytest

from forge_cli.rollout.reader import RunRollout
from forge_cli.rollout.result import RolloutResult
from forge_cli.traces.record import CallRecord
from forge_cli.train.samples import (
    SamplePolicy,
    build_batch,
    build_samples,
    merge_stats,
    segment_calls,
)

NAN = float("nan")


def rec(seq: int, prompt: list[int] | None, completion: list[int] | None, logprobs: list[float] | None = None, *,
        status: str = "ok", rid: str = "r0", version: str = "0", default_logprobs: bool = True) -> CallRecord:
    """A record; each sampled token's logprob is -token/100 unless given (so they are told apart)."""
    if logprobs is None and default_logprobs and completion is not None:
        logprobs = [-t / 100 for t in completion]
    return CallRecord(rollout_id=rid, seq=seq, wire_format="chat", status=status, prompt_token_ids=prompt,
                      completion_token_ids=completion, completion_logprobs=logprobs, weight_version=version)


def rollout(calls: list[CallRecord], rid: str = "r0", *, group: str = "g0", status: str = "ok",
            reward: float | None = 1.0, harness: str = "react") -> RunRollout:
    for call in calls:
        call.rollout_id = rid
    result = RolloutResult(rollout_id=rid, task_id=f"task-{group}", group_id=group, harness=harness,
                           status=status, reward=reward, step=3)  # type: ignore[arg-type]
    return RunRollout(result, calls)


def one_call(rid: str, *, group: str = "g0", status: str = "ok", reward: float | None = 1.0) -> RunRollout:
    return rollout([rec(0, [1, 2], [3, 4])], rid, group=group, status=status, reward=reward)


# ------------------------------------------------------------------------------------------- merging


def test_calls_that_extend_merge_and_the_context_between_is_masked() -> None:
    a = rec(0, [1, 2, 3], [4, 5])
    b = rec(1, [1, 2, 3, 4, 5, 6, 7], [8, 9], version="1")
    c = rec(2, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [11], version="1")
    samples, stats, decisions = segment_calls([c, a, b])  # sorted by seq
    (s,) = samples
    assert s.prompt_ids == [1, 2, 3]
    assert s.response_ids == [4, 5, 6, 7, 8, 9, 10, 11]
    assert s.loss_mask == [1, 1, 0, 0, 1, 1, 0, 1]
    assert s.rollout_logprobs == [-0.04, -0.05, 0.0, 0.0, -0.08, -0.09, 0.0, -0.11]
    assert s.input_ids == (c.prompt_token_ids or []) + (c.completion_token_ids or [])
    assert (s.segment, s.calls, s.truncated, s.weight_versions, s.rollout_id) == (0, 3, 0, ["0", "1"], "r0")
    assert decisions == [(0, "first"), (1, "merged"), (2, "merged")]
    assert (stats.calls, stats.trainable, stats.transitions, stats.merged, stats.prompt_prefix) == (3, 3, 2, 2, 2)
    assert (stats.segments, stats.samples, stats.loss_tokens, stats.merge_share) == (1, 1, 5, 1.0)


def test_a_rewritten_history_starts_a_new_segment_not_a_wrong_merge() -> None:
    calls = [rec(0, [1, 2, 3], [4, 5]),
             rec(1, [1, 2, 3, 4, 5, 6], [7]),
             # the previous answer 7 re-rendered as 70 (prompt prefix kept, answer not)
             rec(2, [1, 2, 3, 4, 5, 6, 70, 9], [10]),
             # a sub-agent (or compaction): a different conversation
             rec(3, [50, 51], [52])]
    samples, stats, decisions = segment_calls(calls)
    assert [(s.segment, s.prompt_ids, s.response_ids, s.loss_mask) for s in samples] == [
        (0, [1, 2, 3], [4, 5, 6, 7], [1, 1, 0, 1]),
        (1, [1, 2, 3, 4, 5, 6, 70, 9], [10], [1]),
        (2, [50, 51], [52], [1])]
    assert [s.calls for s in samples] == [2, 1, 1]
    assert decisions == [(0, "first"), (1, "merged"), (2, "prefix-mismatch"), (3, "prefix-mismatch")]
    assert (stats.transitions, stats.merged, stats.prompt_prefix, stats.segments) == (3, 1, 2, 3)
    assert stats.reasons == {"first": 1, "merged": 1, "prefix-mismatch": 2}
    assert stats.merge_share == pytest.approx(1 / 3)


def test_a_call_with_a_nan_logprob_never_trains_and_never_splits() -> None:
    a = rec(0, [1, 2], [3])
    nan = rec(1, [1, 2, 3, 4], [5, 6], [-0.1, NAN])
    c = rec(2, [1, 2, 3, 4, 5, 6, 7], [8])
    (s,), stats, decisions = segment_calls([a, nan, c])
    assert (s.prompt_ids, s.response_ids) == ([1, 2], [3, 4, 5, 6, 7, 8])
    assert s.loss_mask == [1, 0, 0, 0, 0, 1]
    assert s.rollout_logprobs == [-0.03, 0.0, 0.0, 0.0, 0.0, -0.08]
    assert decisions == [(0, "first"), (1, "nan-logprob"), (2, "merged")]
    assert (stats.calls, stats.trainable, stats.transitions, stats.merged) == (3, 2, 1, 1)
    # first call unusable: the segment starts at the next trainable call, the bad answer in its prompt as context
    inf = rec(0, [1, 2, 3, 4], [5, 6], [-math.inf, -0.2])
    (s,), _, decisions = segment_calls([inf, rec(1, [1, 2, 3, 4, 5, 6, 7], [8])])
    assert (s.prompt_ids, s.response_ids, s.loss_mask) == ([1, 2, 3, 4, 5, 6, 7], [8], [1])
    assert decisions == [(0, "nan-logprob"), (1, "first")]


def test_failed_calls_are_skipped_a_retry_merges_and_their_tokens_never_train() -> None:
    calls = [rec(0, [1, 2], [3]),
             rec(1, [1, 2, 3, 4], [5], status="client_abort"),  # partial answer, then the harness retried
             rec(2, None, None, status="upstream_error"),
             rec(3, [1, 2, 3, 4], [6]),  # the retry
             rec(4, [1, 2, 3, 4, 6], [7], default_logprobs=False),  # logprobs missing
             rec(5, [], [8]),  # no prompt ids
             rec(6, [1, 2, 3, 4, 6, 9], [10, 11], status="incomplete")]  # cut off at the end: left out
    (s,), stats, decisions = segment_calls(calls)
    assert (s.prompt_ids, s.response_ids, s.loss_mask) == ([1, 2], [3, 4, 6], [1, 0, 1])
    assert s.rollout_logprobs == [-0.03, 0.0, -0.06]
    assert s.calls == 2
    assert decisions == [(0, "first"), (1, "not-ok"), (2, "not-ok"), (3, "merged"), (4, "no-logprobs"),
                         (5, "no-ids"), (6, "not-ok")]
    assert stats.reasons == {"first": 1, "not-ok": 3, "merged": 1, "no-logprobs": 1, "no-ids": 1}
    assert (stats.calls, stats.trainable, stats.transitions, stats.merged, stats.loss_tokens) == (7, 2, 1, 1, 2)
    assert segment_calls([calls[1], calls[2]])[0] == [] and segment_calls([])[0] == []


# ------------------------------------------------------------------------------------------- length


def _long() -> list[CallRecord]:
    # prompt of 10 tokens, answer [1, 2, 3], tool result [20, 21], answer [4, 5]: 17 tokens
    prompt = list(range(100, 110))
    return [rec(0, prompt, [1, 2, 3]), rec(1, [*prompt, 1, 2, 3, 20, 21], [4, 5])]


@pytest.mark.parametrize(("max_seq_len", "prompt", "truncated"), [
    (None, list(range(100, 110)), 0),
    (17, list(range(100, 110)), 0),
    (12, [105, 106, 107, 108, 109], 5),
    (8, [109], 9),
])
def test_a_long_segment_loses_context_from_its_left(max_seq_len: int | None, prompt: list[int],
                                                    truncated: int) -> None:
    (s,), stats, _ = segment_calls(_long(), max_seq_len=max_seq_len)
    assert (s.prompt_ids, s.truncated) == (prompt, truncated)
    assert s.response_ids == [1, 2, 3, 20, 21, 4, 5] and s.loss_mask == [1, 1, 1, 0, 0, 1, 1]
    assert s.rollout_logprobs == [-0.01, -0.02, -0.03, 0.0, 0.0, -0.04, -0.05]
    assert (stats.truncated_tokens, stats.truncated_samples, stats.split_segments) == (truncated, int(truncated > 0), 0)


def test_a_segment_whose_loss_span_cannot_fit_is_split_at_a_call_boundary() -> None:
    samples, stats, _ = segment_calls(_long(), max_seq_len=7)
    assert [(s.segment, s.prompt_ids, s.response_ids, s.loss_mask, s.truncated, s.calls) for s in samples] == [
        (0, [106, 107, 108, 109], [1, 2, 3], [1, 1, 1], 6, 1),
        (1, [1, 2, 3, 20, 21], [4, 5], [1, 1], 10, 1)]
    assert samples[1].rollout_logprobs == [-0.04, -0.05]
    assert all(len(s.input_ids) <= 7 for s in samples)
    assert (stats.segments, stats.samples, stats.split_segments, stats.truncated_tokens, stats.truncated_samples,
            stats.over_length_calls, stats.loss_tokens) == (1, 2, 1, 16, 2, 0, 5)


def test_a_call_whose_answer_alone_cannot_fit_is_left_out_and_the_rollout_is_over_length() -> None:
    samples, stats, _ = segment_calls(_long(), max_seq_len=3)
    assert [(s.prompt_ids, s.response_ids, s.loss_mask, s.truncated) for s in samples] == [([21], [4, 5], [1, 1], 14)]
    assert (stats.over_length_calls, stats.split_segments, stats.loss_tokens) == (1, 1, 2)
    with pytest.raises(ValueError, match="max_seq_len=1"):
        segment_calls(_long(), max_seq_len=1)

    def build(treatment: str) -> tuple[float, list[list[int]], str | None, str | None]:
        built = build_samples(rollout(_long()), max_seq_len=3, policy=SamplePolicy(over_length=treatment))  # type: ignore[arg-type]
        assert built.over_length
        return built.reward, [s.loss_mask for s in built.samples], built.treatment, built.dropped

    assert build("mask") == (1.0, [[0, 0]], "mask", None)
    assert build("zero") == (0.0, [[1, 1]], "zero", None)
    assert build("drop") == (1.0, [], "drop", "over_length")


# ------------------------------------------------------------------------------------------- rollouts and groups


def test_samples_carry_the_rollouts_ids_reward_and_step() -> None:
    built = build_samples(rollout(_long(), "roll-7", group="g9", reward=0.5, harness="pi"), max_seq_len=None,
                          policy=SamplePolicy())
    (s,) = built.samples
    assert (s.rollout_id, s.group_id, s.task_id, s.reward, s.step, s.harness) == ("roll-7", "g9", "task-g9", 0.5, 3,
                                                                                     "pi")
    assert (built.treatment, built.dropped, built.over_length) == (None, None, False)
    assert built.decisions == [(0, "first"), (1, "merged")]
    unverified = build_samples(rollout(_long(), reward=None), max_seq_len=None, policy=SamplePolicy())
    assert unverified.samples[0].reward == 0.0


def _batch(policy: SamplePolicy) -> tuple[dict[str, tuple[float, float, list[int]] | None], dict[str, int], int]:
    runs = [one_call("a1", group="g1", reward=1.0), one_call("a0", group="g1", reward=0.0),
            one_call("at", group="g1", status="timeout", reward=1.0),
            one_call("bi", group="g2", status="infra_error", reward=None), one_call("b1", group="g2", reward=1.0),
            one_call("b0", group="g2", status="agent_error", reward=0.0)]
    batch = build_batch(runs, policy)
    by_id: dict[str, tuple[float, float, list[int]] | None] = {}
    for b in batch.rollouts:
        by_id[b.rollout_id] = (b.reward, round(b.advantage, 5), b.samples[0].loss_mask) if b.samples else None
        for s in b.samples:
            assert (s.reward, s.advantage) == (b.reward, b.advantage)
    assert [s.rollout_id for s in batch.samples] == [r for r, v in by_id.items() if v is not None]
    return by_id, batch.dropped, batch.groups


def test_timeout_mask_keeps_the_rollout_in_its_group_without_loss() -> None:
    by_id, dropped, groups = _batch(SamplePolicy())
    # g1 rewards [1, 0, 1]: mean 2/3, sample std sqrt(1/3); g2 rewards [1, 0]
    assert by_id == {"a1": (1.0, 0.57735, [1, 1]), "a0": (0.0, -1.1547, [1, 1]), "at": (1.0, 0.57735, [0, 0]),
                     "bi": None, "b1": (1.0, 0.70711, [1, 1]), "b0": (0.0, -0.70711, [1, 1])}
    assert (dropped, groups) == ({"infra_error": 1}, 2)


def test_timeout_zero_and_drop_and_dropping_a_group_on_infra() -> None:
    by_id, _, _ = _batch(SamplePolicy(timeout="zero"))
    assert (by_id["a1"], by_id["a0"], by_id["at"]) == ((1.0, 1.1547, [1, 1]), (0.0, -0.57735, [1, 1]),
                                                       (0.0, -0.57735, [1, 1]))
    by_id, dropped, _ = _batch(SamplePolicy(timeout="drop"))
    assert (by_id["a1"], by_id["a0"], by_id["at"]) == ((1.0, 0.70711, [1, 1]), (0.0, -0.70711, [1, 1]), None)
    assert dropped == {"infra_error": 1, "timeout": 1}
    by_id, dropped, _ = _batch(SamplePolicy(drop_group_on_infra=True))
    assert [k for k, v in by_id.items() if v is None] == ["bi", "b1", "b0"]
    assert dropped == {"infra_error": 1, "infra_group": 2}


def test_status_over_length_and_timeout_together() -> None:
    policy = SamplePolicy(timeout="mask", over_length="zero")
    built = build_samples(one_call("x", status="over_length"), max_seq_len=None, policy=policy)
    assert (built.treatment, built.reward, built.samples[0].loss_mask, built.over_length) == ("zero", 0.0, [1, 1],
                                                                                            True)
    # a timed-out rollout that is also over-length: both treatments take effect, drop wins over both
    built = build_samples(rollout(_long(), status="timeout"), max_seq_len=3, policy=policy)
    assert (built.treatment, built.reward, built.samples[0].loss_mask) == ("mask+zero", 0.0, [0, 0])
    built = build_samples(rollout(_long(), status="timeout"), max_seq_len=3,
                          policy=SamplePolicy(timeout="drop", over_length="mask"))
    assert (built.treatment, built.dropped, built.samples) == ("drop", "timeout", [])


def test_policy_options_are_checked() -> None:
    with pytest.raises(ValueError, match="timeout='keep'"):
        SamplePolicy(timeout="keep")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="advantage='ppo'"):
        SamplePolicy(advantage="ppo")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_seq_len=1"):
        SamplePolicy(max_seq_len=1)


def test_batch_uses_the_policy_length_and_reports_flat_stats() -> None:
    runs = [rollout(_long(), "l0", group="g"), one_call("l1", group="g", reward=0.0),
            one_call("l2", group="h", status="infra_error")]
    batch = build_batch(runs, SamplePolicy(max_seq_len=7))
    assert [(s.rollout_id, s.segment) for s in batch.samples] == [("l0", 0), ("l0", 1), ("l1", 0)]
    assert batch.stats() == {
        "rollouts": 3.0, "kept": 2.0, "dropped_infra_error": 1.0, "groups": 2.0, "samples": 3.0, "masked": 0.0,
        "zeroed": 0.0, "calls": 4.0, "trainable": 4.0, "transitions": 1.0, "merged": 1.0, "prompt_prefix": 1.0,
        "segments": 3.0, "samples_built": 4.0, "split_segments": 1.0, "truncated_tokens": 16.0,
        "truncated_samples": 2.0, "over_length_calls": 0.0, "image_samples_dropped": 0.0, "loss_tokens": 7.0,
        "loss_tokens_built": 9.0,
        "calls_first": 3.0, "calls_merged": 1.0, "merge_share": 1.0}


def test_merge_stats_per_harness() -> None:
    built = [build_samples(rollout(_long(), "p0", harness="pi"), max_seq_len=None, policy=SamplePolicy()),
             build_samples(rollout([rec(0, [1], [2]), rec(1, [9], [3])], "p1", harness="pi"), max_seq_len=None,
                           policy=SamplePolicy()),
             build_samples(one_call("o0", status="infra_error"), max_seq_len=None, policy=SamplePolicy())]
    stats = merge_stats(built)
    assert sorted(stats) == ["pi", "react"]
    pi = stats["pi"]
    assert (pi.rollouts, pi.stats.calls, pi.stats.transitions, pi.stats.merged, pi.stats.segments) == (2, 4, 2, 1, 3)
    assert (pi.merge_share, pi.prompt_prefix_share) == (0.5, 0.5)
    assert pi.to_dict()["merge_share"] == 0.5 and stats["react"].merge_share is None


# ---------------------------------------------------------------------------------------------- images
def _with_images(call: CallRecord, *urls: str, upstream: bool = True) -> CallRecord:
    request = {"model": "policy", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "look"},
                                     *({"type": "image_url", "image_url": {"url": u}} for u in urls)]}]}
    if upstream:
        call.upstream_request = request
    else:
        call.request = request
    return call


def test_a_segment_carries_the_images_of_its_last_call() -> None:
    first = _with_images(rec(0, [1, 2], [3]), "data:image/png;base64,AAAA")
    second = _with_images(rec(1, [1, 2, 3, 4], [5]), "data:image/png;base64,AAAA", "data:image/jpeg;base64,BBBB")
    (sample,), stats, _ = segment_calls([first, second])
    assert sample.images == ["AAAA", "BBBB"] and sample.response_ids == [3, 4, 5] and stats.image_samples_dropped == 0
    # a Chat Completions client's own request is what vLLM got (no translated copy is kept)
    (plain,), _, _ = segment_calls([_with_images(rec(0, [1, 2], [3]), "data:image/png;base64,CCCC", upstream=False)])
    assert plain.images == ["CCCC"]
    (text,), _, _ = segment_calls([rec(0, [1, 2], [3])])
    assert text.images == []


def test_images_that_cannot_be_trained_on_drop_their_sample() -> None:
    # an image vLLM fetched by URL: forge does not fetch it again
    samples, stats, _ = segment_calls([_with_images(rec(0, [1, 2], [3]), "https://example.com/shot.png")])
    assert samples == [] and stats.image_samples_dropped == 1
    # a cut from the left would go through the image's placeholders
    samples, stats, _ = segment_calls([_with_images(rec(0, [1, 2, 3, 4, 5], [6, 7]), "data:image/png;base64,AAAA")],
                                      max_seq_len=4)
    assert samples == [] and stats.image_samples_dropped == 1
