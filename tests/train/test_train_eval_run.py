"""`forge train` with periodic evaluation, for real: react on one builtin task in docker, group size 2, two steps,
the evaluation after the last one; DAPO's `drop` and `trainer.max_staleness=1` on the same run (the second step's
rollouts start while the first update runs).

Checks: the last metrics line (only it) has the evaluation; its rollouts ran at eval.temperature (the proxy's
per-rollout sampling) while training's ran at rollout.sampling's, on the last step's weights, under ids of their
own, and never reached results.jsonl (what the trainer and `forge samples export` read); every training record is
at most one update stale and the metrics say so; dynamic sampling's group counts add up.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO
from tests.train.test_train_run import _env

# a whole forge train run with periodic evaluation (~95 s on 2 cores): make test-e2e, keeping make test under 40 min
pytestmark = [pytest.mark.e2e, pytest.mark.vllm, pytest.mark.mitm, pytest.mark.docker]


def test_train_evaluates_at_eval_temperature_and_never_trains_on_it(tmp_path: Path, policy_server: Any) -> None:
    from forge_cli.serve.prepare import default_model_dir
    from forge_cli.serve.weights import update_weights
    from forge_cli.traces.store import iter_calls, open_store

    args = [sys.executable, "-m", "forge_cli", "train", "env.task_ids=[create-edit-touch-guided-0]", "runtime=docker",
            "algo.group_size=2", "algo.dynamic_sampling=drop", "trainer.tasks_per_step=1", "trainer.steps=2",
            "trainer.learning_rate=1e-5", "trainer.max_staleness=1", "trainer.eval_every=2",
            "trainer.eval_max_tasks=1", "eval.trials=1", "eval.temperature=0", "rollout.sampling.temperature=0.7",
            f"proxy.upstream={policy_server.url}", "proxy.port=0", f"run.output_dir={tmp_path / 'runs'}", "--json"]
    try:
        done = subprocess.run(args, cwd=REPO, env=_env(tmp_path), capture_output=True, text=True, timeout=1800)
        assert done.returncode == 0, done.stderr[-3000:]
        summary = json.loads(done.stdout)
        run_dir = Path(summary["run_dir"])
        lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        assert [m["step"] for m in lines] == [1, 2]
        assert "eval_pass_rate" not in lines[0] and lines[1]["eval_tasks"] == 1.0
        assert lines[1]["eval_trials"] + lines[1]["eval_infra_errors"] == 1.0
        assert summary["eval_pass_rate"] == lines[1]["eval_pass_rate"]
        assert "eval pass rate" in done.stderr and "staleness max" in done.stderr
        for m in lines:
            assert m["max_staleness"] == 1.0 and m["staleness_max"] <= 1.0
            assert m["groups"] == 1.0 and m["groups_kept"] + m["groups_dropped"] == 1.0

        evaluated = [json.loads(line) for line in (run_dir / "eval" / "step-2" / "results.jsonl").read_text()
                     .splitlines()]
        trained = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
        assert len(evaluated) == 1 and len(trained) == 4 and (run_dir / "eval" / "step-2" / "eval.json").is_file()
        assert not {r["rollout_id"] for r in evaluated} & {r["rollout_id"] for r in trained}
        assert {r["step"] for r in trained} == {0, 1}
        conn = open_store(run_dir / "traces.sqlite", readonly=True)
        try:
            def calls(rollout: dict[str, Any]) -> list[Any]:
                return list(iter_calls(conn, rollout["rollout_id"]))

            eval_calls = calls(evaluated[0])
            assert eval_calls and all(c.weight_version == "step-2" for c in eval_calls)
            assert all((c.upstream_request or {}).get("temperature") == 0.0 for c in eval_calls)
            for result in trained:
                for call in calls(result):
                    assert (call.upstream_request or {}).get("temperature") == 0.7
                    allowed = {"0"} if result["step"] == 0 else {"0", "step-1"}
                    assert call.weight_version in allowed, (result["step"], call.weight_version)
        finally:
            conn.close()
    finally:
        update_weights(policy_server, default_model_dir(), version="default")
