"""``forge branch``: continuations of a recorded rollout from the state after one of its calls, for real (react in
local sandboxes, the proxy, vLLM). Four continuations at call 2: each answers calls 0-1 from the recording and
samples from call 2 on; their samples give the shared prefix no loss; the original and its continuations are one
group whose advantages are computed within it. Where to branch is chosen from the records (unit tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from forge_cli.errors import UserError
from forge_cli.replay.branch import branch_point, failed_tool_result
from forge_cli.rollout.reader import RunRollout, read_run
from forge_cli.rollout.result import RolloutResult
from forge_cli.traces.record import CallRecord
from forge_cli.train.samples import SamplePolicy, build_batch, segment_calls
from tests.helpers import forge_json
from tests.replay.recorded import record_react


def _call(seq: int, *results: str) -> CallRecord:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "task"}]
    if results:
        messages += [{"role": "assistant", "content": "", "tool_calls": []},
                     *({"role": "tool", "content": text} for text in results)]
    return CallRecord(rollout_id="r", seq=seq, wire_format="chat", status="ok", request={"messages": messages})


def _rollout(*calls: CallRecord) -> RunRollout:
    return RunRollout(RolloutResult("r", "t", "g", "react", "ok"), list(calls))


def test_the_first_failure_is_the_first_call_whose_prompt_carries_a_failed_tool_result() -> None:
    assert not failed_tool_result(_call(1, "exit_code: 0\nstdout:\nok"))
    assert failed_tool_result(_call(1, "exit_code: 2\nstderr:\nls: cannot access"))
    assert failed_tool_result(_call(1, "bash: foo: command not found"))
    recorded = _rollout(_call(0), _call(1, "exit_code: 0"), _call(2, "cat: x: No such file or directory"), _call(3))
    assert branch_point(recorded, "first-failure", None) == 2
    assert branch_point(recorded, "1", None) == 1 and 1 <= branch_point(recorded, "random", 7) <= 3
    with pytest.raises(UserError, match="no call's prompt carries a failed tool result"):
        branch_point(_rollout(_call(0), _call(1, "exit_code: 0")), "first-failure", None)
    with pytest.raises(UserError, match="from 1 to 3"):
        branch_point(recorded, "4", None)


def test_a_recorded_prefix_carries_no_loss() -> None:
    def call(seq: int, prompt: list[int], completion: list[int]) -> CallRecord:
        return CallRecord(rollout_id="r", seq=seq, wire_format="chat", status="ok", prompt_token_ids=prompt,
                          completion_token_ids=completion, completion_logprobs=[-0.5] * len(completion))

    calls = [call(0, [1, 2], [3, 4]), call(1, [1, 2, 3, 4, 5], [6]), call(2, [1, 2, 3, 4, 5, 6, 7], [8, 9])]
    (whole,), _, _ = segment_calls(calls)
    (branched,), _, _ = segment_calls(calls, prefix_calls=2)
    assert whole.response_ids == branched.response_ids == [3, 4, 5, 6, 7, 8, 9]
    assert whole.loss_mask == [1, 1, 0, 1, 0, 1, 1] and branched.loss_mask == [0, 0, 0, 0, 0, 1, 1]
    assert segment_calls(calls[:2], prefix_calls=2)[0] == [], "a recorded prefix alone is no sample"


def _forge(tmp_path: Path, *args: str) -> dict[str, Any]:
    return forge_json(tmp_path / "sbx", *args)


@pytest.mark.mitm
@pytest.mark.requires("model", "bubblewrap")
def test_four_continuations_at_call_2_form_their_own_group(tmp_path: Path, policy_server: Any) -> None:
    run_dir, results = record_react(tmp_path, policy_server.url)
    source = max(results, key=lambda r: r["calls"])
    assert source["calls"] >= 3, results
    summary = _forge(tmp_path, "branch", f"{run_dir}/{source['rollout_id']}", "--at", "2", "-n", "4",
                     f"proxy.upstream={policy_server.url}", "proxy.port=0", "model.max_output_tokens=48",
                     f"run.output_dir={tmp_path / 'branch'}")
    assert summary["at"] == 2 and len(summary["members"]) == 5
    continuations = [m for m in summary["members"] if not m["original"]]
    assert len(continuations) == 4 and all(m["prefix_faithful"] for m in continuations), continuations
    branch_dir = Path(summary["run_dir"])
    rollouts = {r.result.rollout_id: r for r in read_run(branch_dir)}
    assert set(rollouts) == {m["rollout_id"] for m in summary["members"]}
    assert {r.result.group_id for r in rollouts.values()} == {summary["group_id"]}
    for member in continuations:  # calls 0 and 1 as recorded, token for token; call 2 sampled again
        calls = rollouts[member["rollout_id"]].calls
        original = rollouts[source["rollout_id"]].calls
        assert [c.prompt_token_ids for c in calls[:2]] == [c.prompt_token_ids for c in original[:2]]
        assert [c.completion_token_ids for c in calls[:2]] == [c.completion_token_ids for c in original[:2]]
    batch = build_batch(rollouts.values(), SamplePolicy(advantage="grpo"))
    kept = [b for b in batch.rollouts if not b.dropped]
    for built in kept:  # no loss token falls in the prefix: the first is past call 2's prompt (which holds calls
        calls = rollouts[built.rollout_id].calls  # 0-1 and their results); they are exactly the later answers
        positions = [len(s.prompt_ids) + i for s in built.samples for i, m in enumerate(s.loss_mask) if m]
        assert positions and min(positions) >= len(calls[2].prompt_token_ids or [])
        assert len(positions) == sum(len(c.completion_token_ids or []) for c in calls[2:] if c.status == "ok")
    rewards = [b.reward for b in kept]
    mean = sum(rewards) / len(rewards)
    for built in kept:  # GRPO within the branch group: reward minus the group's mean (over its std when it varies)
        assert (built.advantage > 0) == (built.reward > mean) and (built.advantage < 0) == (built.reward < mean)
    assert abs(sum(b.advantage for b in kept)) < 1e-4
    by_id = {s["rollout_id"]: s for s in summary["samples"]}
    assert all(by_id[m["rollout_id"]]["group_id"] == summary["group_id"] for m in summary["members"])
