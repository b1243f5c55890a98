"""``forge train algo.branch_at=random``: one real step (react in local sandboxes, vLLM, the proxy and its replay
upstream, the local trainer) in which one rollout is forked twice from a random call; the continuations answer the
original's prefix from the recording (faithfully: a real replay), form a group of their own with the original, and
the update trains on the step's groups and the branch group. A budget of sampled tokens (vLLM's counter, which
equals the completion tokens of every live call) ends the run after that step, which is evaluated as a last step
is. The shared policy server's weights are put back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import forge_json

# one training step plus two branched rollouts (~2 min on 2 cores): make test-e2e
pytestmark = [pytest.mark.e2e, pytest.mark.vllm, pytest.mark.mitm]


@pytest.mark.requires("model", "bubblewrap")
def test_a_training_step_branches_a_rollout_and_trains_on_the_branch_group(tmp_path: Path, policy_server: Any) -> None:
    from forge_cli.rollout.reader import read_run
    from forge_cli.serve.prepare import default_model_dir
    from forge_cli.serve.weights import update_weights
    from forge_cli.train.samples import SamplePolicy, build_batch

    try:
        summary = forge_json(tmp_path / "sbx", "train", "env.task_ids=[create-edit-touch-guided-0]",
                             "algo.group_size=2", "trainer.tasks_per_step=1", "trainer.steps=3",
                             "trainer.max_sampled_tokens=1", "trainer.eval_every=5", "trainer.eval_max_tasks=1",
                             "eval.trials=1",
                             "algo.branch_at=random", "algo.branch_n=2", "algo.branch_rollouts=1",
                             "trainer.precision=float32", "model.max_output_tokens=48", "proxy.port=0",
                             f"proxy.upstream={policy_server.url}", f"run.output_dir={tmp_path / 'runs'}")
    finally:
        update_weights(policy_server, default_model_dir())
    run_dir = Path(summary["run_dir"])
    (metrics,) = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert metrics["branch_groups"] == 1 and metrics["branch_rollouts"] == 2, metrics
    assert metrics["branch_prefix_faithful"] == 1.0, metrics
    # a budget of 1 sampled token: the first step spends it, and is the last of trainer.steps=3: evaluated as the
    # last step is (eval_every=5 would not reach it)
    assert summary["stopped_by_budget"] and summary["sampled_tokens"] == metrics["sampled_tokens"] > 0, summary
    assert "eval_pass_rate" in metrics and metrics["eval_trials"] == 1, metrics
    results = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    branched = [r for r in results if r["group_id"].startswith("branch-")]
    assert len(branched) == 2 and len({r["group_id"] for r in branched}) == 1
    k = branched[0]["prefix_calls"]
    assert k >= 1 and all(r["prefix_calls"] == k for r in branched)
    rollouts = {r.result.rollout_id: r for r in read_run(run_dir)}
    original_id = branched[0]["group_id"].removeprefix("branch-").rsplit("-at", 1)[0]
    original = rollouts[original_id].calls
    for r in branched:  # the prefix as recorded, token for token
        calls = rollouts[r["rollout_id"]].calls
        assert [c.prompt_token_ids for c in calls[:k]] == [c.prompt_token_ids for c in original[:k]]
        assert [c.completion_token_ids for c in calls[:k]] == [c.completion_token_ids for c in original[:k]]
        built = build_batch([rollouts[r["rollout_id"]]], SamplePolicy(advantage="none")).rollouts[0]
        trained = sum(s.loss_tokens for s in built.samples)
        assert trained == sum(len(c.completion_token_ids or []) for c in calls[k:] if c.status == "ok")
    assert (run_dir / "checkpoints" / "step-1").is_dir() and metrics["weight_version"] == "step-1"
    # vLLM's own counter equals the completion tokens of every call it sampled: the step's rollouts and the
    # continuations' live calls; the replayed prefixes are what the continuations did not sample again
    live = sum(len(c.completion_token_ids or []) for r in rollouts.values() for c in r.calls[r.result.prefix_calls:])
    assert metrics["sampled_tokens"] == live, (metrics["sampled_tokens"], live)
    assert metrics["branch_prefix_tokens_replayed"] == 2 * sum(len(c.completion_token_ids or []) for c in original[:k])
