"""What a training step does with its rollouts, from the experiment's options: the sample builder's rules
(algo.timeout / over_length / drop_group_on_infra), DAPO's overlong reward shaping before advantages (values
computed by hand), and the stop when the policy server is gone (after the rollouts, around the weight sync)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from forge_cli.config.compose import compose
from forge_cli.errors import UserError
from forge_cli.rollout.reader import RunRollout
from forge_cli.rollout.result import RolloutResult
from forge_cli.traces.record import CallRecord
from forge_cli.train.samples import SamplePolicy, build_batch
from forge_cli.train.step import (
    PolicyServerLost,
    check_policy_server,
    policy_server_sync,
    response_length,
    sample_policy,
    shape_overlong,
    train_on_step,
)
from tests.requires import requires

DEAD = "http://127.0.0.1:9"


def rollout(rid: str, lengths: list[int], *, reward: float | None = 1.0, status: str = "ok", group: str = "g0",
            error: str | None = None) -> RunRollout:
    """A rollout with one ok call per length (prompt [1, 2], completion of that many tokens, logprob -0.5 each)."""
    calls = [CallRecord(rollout_id=rid, seq=i, wire_format="chat", status="ok", prompt_token_ids=[1, 2],
                        completion_token_ids=[7] * n, completion_logprobs=[-0.5] * n, weight_version="0")
             for i, n in enumerate(lengths)]
    result = RolloutResult(rollout_id=rid, task_id=group, group_id=group, harness="react", status=status,  # type: ignore[arg-type]
                           reward=reward, error=error)
    return RunRollout(result, calls)


# ---------------------------------------------------------------------------------------------- sample policy

def test_the_sample_policy_comes_from_the_algo_options() -> None:
    exp = compose(["algo=rloo", "algo.timeout=zero", "algo.over_length=drop", "algo.drop_group_on_infra=true",
                   "trainer.max_seq_len=512"]).experiment
    assert sample_policy(exp) == SamplePolicy(max_seq_len=512, drop_group_on_infra=True, timeout="zero",
                                              over_length="drop", advantage="rloo", norm_adv_by_std=False,
                                              epsilon=1e-6)
    defaults = sample_policy(compose([]).experiment)
    assert (defaults.timeout, defaults.over_length, defaults.drop_group_on_infra) == ("mask", "mask", False)


def test_over_length_and_infra_rules_follow_the_config() -> None:
    rollouts = [rollout("a", [3], reward=1.0), rollout("b", [3], reward=0.0, status="over_length"),
                rollout("c", [3], reward=0.0), rollout("d", [3], reward=None, status="infra_error", group="g1"),
                rollout("e", [3], reward=1.0, group="g1")]
    # defaults: over_length masked (its reward 0 counts for the group), infra dropped alone
    batch = build_batch(rollouts, sample_policy(compose([]).experiment))
    assert batch.dropped == {"infra_error": 1}
    # g0 rewards [1, 0, 0]: mean 1/3, std (n-1) sqrt(1/3) -> 2/3 / 0.57735 = 1.15470, -1/3 / 0.57735 = -0.57735;
    # g1 keeps e alone: a group of one has mean 0 and std 1 (veRL), so its advantage is its reward
    advantages = {b.rollout_id: b.advantage for b in batch.rollouts}
    assert advantages == pytest.approx({"a": 1.15470, "b": -0.57735, "c": -0.57735, "d": 0.0, "e": 1.0}, abs=1e-5)
    masked = next(b for b in batch.rollouts if b.rollout_id == "b")
    assert masked.treatment == "mask" and all(m == 0 for s in masked.samples for m in s.loss_mask)
    # drop: the over-length rollout leaves before advantages; the infra rollout takes its group along
    exp = compose(["algo.over_length=drop", "algo.drop_group_on_infra=true"]).experiment
    batch = build_batch(rollouts, sample_policy(exp))
    assert batch.dropped == {"over_length": 1, "infra_error": 1, "infra_group": 1}
    # g0 rewards [1, 0]: mean 0.5, std 0.70711 -> +-0.70711
    assert {b.rollout_id: b.advantage for b in batch.rollouts if not b.dropped} == pytest.approx(
        {"a": 0.70711, "c": -0.70711}, abs=1e-5)


# ---------------------------------------------------------------------------------------------- overlong shaping

def test_overlong_shaping_by_hand() -> None:
    """Limit 40 tokens, buffer 8, factor 1: no penalty up to 32 tokens, then -(length - 32) / 8."""
    exp = compose(["algo=dapo", "model.max_output_tokens=40", "algo.overlong_buffer_tokens=8"]).experiment
    rollouts = [rollout("a", [10, 32]), rollout("b", [5, 36]), rollout("c", [40], reward=0.0),
                rollout("d", [38], reward=None)]
    assert [response_length(r) for r in rollouts] == [32, 36, 40, 38]
    shaped, metrics = shape_overlong(rollouts, exp)
    assert [r.result.reward for r in shaped] == [1.0, 0.5, -1.0, -0.75]
    assert shaped[0] is rollouts[0], "an unpenalised rollout is left as it is"
    assert rollouts[1].result.reward == 1.0, "the input is not changed"
    assert metrics == {"overlong_penalized": 3.0, "overlong_penalty_mean": (-0.5 - 1.0 - 0.75) / 4}
    # factor 0.5 halves it; buffer 0 turns it off
    half = compose(["algo=dapo", "model.max_output_tokens=40", "algo.overlong_buffer_tokens=8",
                    "algo.overlong_penalty_factor=0.5"]).experiment
    assert [r.result.reward for r in shape_overlong(rollouts, half)[0]] == [1.0, 0.75, -0.5, -0.375]
    assert shape_overlong(rollouts, compose([]).experiment) == (rollouts, {})


def test_shaping_comes_before_advantages() -> None:
    """Both rollouts solved the task; the one that ran into the buffer gets 0.5: GRPO over [1.0, 0.5] gives
    +-0.25 / 0.35355 = +-0.70711 instead of two zeros."""
    from forge_cli.serve.prepare import default_model_dir
    from forge_cli.train.local import LocalTrainer

    requires("core", "model")
    model_dir = default_model_dir()
    exp = compose(["algo=dapo", "model.max_output_tokens=40", "algo.overlong_buffer_tokens=8",
                   "trainer.learning_rate=1e-5"]).experiment
    rollouts = [rollout("short", [12]), rollout("long", [36])]
    trainer = LocalTrainer(model_dir, exp.trainer, exp.algo)
    metrics = train_on_step(trainer, rollouts, exp)
    assert metrics["skipped_update"] == 0.0 and metrics["train_tokens"] == 12 + 36  # the sampled tokens
    assert (metrics["overlong_penalized"], metrics["samples_loss_tokens"]) == (1.0, 48.0)
    # the same rollouts without shaping: equal rewards, no signal, no update
    grpo = compose(["model.max_output_tokens=40"]).experiment
    unshaped = train_on_step(trainer, rollouts, grpo)
    assert unshaped["skipped_update"] == 1.0 and "overlong_penalized" not in unshaped


# ---------------------------------------------------------------------------------------------- policy server loss

GONE = "the policy server did not answer call 2 (HTTP 502: [Errno 111] Connection refused)"


@pytest.fixture
def healthy() -> Iterator[str]:
    """An HTTP server that answers /health with 200 (what forge's health check asks of the policy server)."""

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _results(*statuses: str) -> list[RolloutResult]:
    return [RolloutResult(rollout_id=f"r{i}", task_id="t", group_id="g", harness="react", status=s,  # type: ignore[arg-type]
                          error=GONE if s == "infra_error" else None) for i, s in enumerate(statuses)]


def test_a_step_whose_rollouts_failed_on_a_dead_policy_server_stops_the_run(tmp_path: Path,
                                                                            healthy: str) -> None:
    # every rollout failed on it: stop, whether or not it answers /health now
    for url in (DEAD, healthy):
        with pytest.raises(PolicyServerLost) as raised:
            check_policy_server(url, _results("infra_error", "infra_error"), tmp_path, step=4)
        error = raised.value
        assert isinstance(error, UserError) and error.exit_code == 1
        assert error.message.startswith(f"the policy server at {url} stopped answering during step 5 (2 of 2 "
                                        f"rollouts failed on it: {GONE})")
        assert str(tmp_path) in error.message and error.fix and f"forge train --resume {tmp_path}" in error.fix
    # some did: stop only when it no longer answers
    some = _results("ok", "infra_error")
    check_policy_server(healthy, some, tmp_path, step=0)
    with pytest.raises(PolicyServerLost):
        check_policy_server(DEAD, some, tmp_path, step=0)
    # none did (an infra error of a sandbox is not the policy server's): go on without asking it
    sandbox = _results("ok", "agent_error")
    sandbox.append(RolloutResult(rollout_id="x", task_id="t", group_id="g", harness="react", status="infra_error",
                                 error="sandbox died"))
    check_policy_server(DEAD, sandbox, tmp_path, step=0)


def test_a_failed_weight_sync_stops_the_run_resumably(tmp_path: Path) -> None:
    from forge_cli.serve.weights import update_weights

    ckpt = tmp_path / "checkpoints" / "step-3"
    ckpt.mkdir(parents=True)
    (ckpt / "config.json").write_text("{}")
    (ckpt / "model.safetensors").write_bytes(b"")
    for version in (None, "step-3"):  # asks the server its version first, or posts /pause first
        with pytest.raises(PolicyServerLost) as raised, policy_server_sync(DEAD, tmp_path, 3):
            update_weights(DEAD, ckpt, version=version)
        assert raised.value.exit_code == 1
        assert raised.value.message.startswith(f"the policy server at {DEAD} failed the weight update after step 3")
        assert raised.value.fix and raised.value.fix.endswith(f"forge train --resume {tmp_path}")
    # anything else passes through unchanged
    with pytest.raises(ValueError), policy_server_sync(DEAD, tmp_path, 3):
        raise ValueError("not a sync failure")
