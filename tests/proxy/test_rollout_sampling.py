"""Per-rollout sampling: a rollout registered with ``sampling`` has those fields enforced on its calls over the
proxy's own ``forge_sampling`` (how forge train's periodic evaluation runs at eval.temperature beside training
rollouts in one proxy); the upstream request recorded for each call shows what was used."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from forge_cli.proxy.launcher import start_proxy
from forge_cli.proxy.state import rollout_sampling
from tests.proxy.conftest import FakeUpstream, need_mitmdump

MSG = [{"role": "user", "content": "hi"}]


def _chat(rollout: dict[str, object], body: dict[str, object]) -> httpx.Response:
    return httpx.post(f"{rollout['base_url']}/v1/chat/completions", content=json.dumps(body).encode(), timeout=20,
                      headers={"authorization": f"Bearer {rollout['key']}", "content-type": "application/json"})


def test_registration_sampling_is_checked() -> None:
    assert rollout_sampling(None) == {}
    assert rollout_sampling({"temperature": 0, "top_p": 0.5}) == {"temperature": 0, "top_p": 0.5}
    for bad, needle in (([1], "JSON object"), ({"model": "x"}, "unknown field(s) model"),
                        ({"temperature": "hot"}, "sampling.temperature: must be a number"),
                        ({"seed": True}, "sampling.seed: must be a number")):
        with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace(")", r"\)")):
            rollout_sampling(bad)


@pytest.mark.mitm
def test_rollout_sampling_overrides_the_proxys(fake_upstream: FakeUpstream, tmp_path: Path) -> None:
    need_mitmdump()
    with start_proxy(fake_upstream.url, store=tmp_path / "traces.sqlite",
                     sampling={"temperature": 0.7, "top_p": 0.9}) as proxy:
        train = proxy.register(task="t")
        evaluation = proxy.register(task="t", sampling={"temperature": 0.0})
        assert evaluation["sampling"] == {"temperature": 0.0}
        for rollout in (train, evaluation):
            assert _chat(rollout, {"model": "m", "messages": MSG, "temperature": 1.3}).status_code == 200
        used = [proxy.calls(str(r["rollout_id"]))[0]["upstream_request"] for r in (train, evaluation)]
        assert (used[0]["temperature"], used[0]["top_p"]) == (0.7, 0.9)
        assert (used[1]["temperature"], used[1]["top_p"]) == (0.0, 0.9), "the rollout's over the proxy's"
        refused = httpx.post(proxy.url + "/forge/v1/rollouts", json={"sampling": {"max_tokens": 5}}, timeout=10,
                             headers={"authorization": f"Bearer {proxy.admin_token}"})
        assert refused.status_code == 400 and "unknown field(s) max_tokens" in refused.text


def test_call_seed_is_per_task_step_sample_and_call() -> None:
    from forge_cli.proxy.state import Rollout, call_seed

    def rollout(rid: str, task: str, step: int, sample: int) -> Rollout:
        return Rollout(rid, b"", task=task, meta={"step": step, "sample": sample})

    seed = call_seed(7, rollout("a", "t", 0, 1), 2)
    assert 0 <= seed < 2**31
    # another run's rollout id, the same task, step, sample and call: the same draw (comparable evaluations)
    assert call_seed(7, rollout("b", "t", 0, 1), 2) == seed
    others = {call_seed(7, rollout("a", "t", 0, 1), 3), call_seed(7, rollout("a", "t", 0, 2), 2),
              call_seed(7, rollout("a", "t", 1, 1), 2), call_seed(7, rollout("a", "u", 0, 1), 2),
              call_seed(8, rollout("a", "t", 0, 1), 2)}
    assert seed not in others and len(others) == 5


@pytest.mark.mitm
def test_the_runs_seed_becomes_each_calls_own(fake_upstream: FakeUpstream, tmp_path: Path) -> None:
    need_mitmdump()
    with start_proxy(fake_upstream.url, store=tmp_path / "traces.sqlite", sampling={"seed": 7}) as proxy:
        rollouts = [proxy.register(task="t", meta={"step": 0, "sample": s}) for s in (0, 0, 1)]
        for rollout in rollouts:
            for _ in range(2):
                assert _chat(rollout, {"model": "m", "messages": MSG, "seed": 123}).status_code == 200
        seeds = [[c["upstream_request"]["seed"] for c in proxy.calls(str(r["rollout_id"]))] for r in rollouts]
        assert seeds[0] == seeds[1], "same task, step, sample: the same seeds, call by call"
        assert seeds[0][0] != seeds[0][1] and seeds[0] != seeds[2] and 123 not in seeds[0]
