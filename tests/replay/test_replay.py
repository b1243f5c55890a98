"""``forge rollout --replay``: a recorded rollout re-run with its calls answered from the recording, through the
real proxy, vLLM (its ``/tokenize``) and harnesses. A faithful replay asks, call for call, exactly the prompts the
recording holds (token for token) and ends as the original did; a perturbed sandbox (its shell traces every
command: ``SHELLOPTS=xtrace``) changes the first tool result, the replay reports the divergence at the call that
carries it, ends ``infra_error`` and yields no training sample."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from forge_cli.replay.compare import compare, patterns
from forge_cli.replay.script import lane
from forge_cli.rollout.reader import read_run
from forge_cli.testing.tool_relay import ToolRelay
from forge_cli.train.samples import SamplePolicy, build_batch
from tests.helpers import forge, forge_json
from tests.replay.recorded import record_react


def _decode(ids: list[int]) -> str:
    return "".join(chr(ord("a") + i % 26) if i < 1000 else f"<{i}>" for i in ids)


def test_identical_prompts_compare_equal_with_nothing_masked() -> None:
    found = compare([1, 2, 3], [1, 2, 3], _decode)
    assert found.equal and found.masked == 0 and found.at is None and found.describe() == "identical"


def test_a_difference_is_reported_at_its_first_token_with_the_text_around_it() -> None:
    found = compare([1, 2, 3, 4, 5], [1, 2, 9, 4, 5], _decode)
    assert not found.equal and found.at == 2 and found.recorded == "bcdef" and found.live == "bcjef"
    assert "token 2 of 5" in found.describe()


def test_a_declared_volatile_value_is_masked_and_counted_and_nothing_else_is() -> None:
    volatile = patterns([r"<10\d\d>"])  # a 'session id' token of this toy vocabulary
    excused = compare([1, 1001, 2], [1, 1002, 2], _decode, volatile)
    assert excused.equal and excused.masked == 1 and excused.at == 1
    elsewhere = compare([1, 1001, 2], [1, 1002, 3], _decode, volatile)
    assert not elsewhere.equal and elsewhere.at == 1
    with pytest.raises(ValueError, match="replay_volatile"):
        patterns(["("])


def test_a_lane_is_the_set_of_tools_a_request_offers() -> None:
    tools = [{"type": "function", "function": {"name": n}} for n in ("read", "bash")]
    assert lane({"tools": tools}) == ("bash", "read") and lane({"messages": []}) == () == lane(None)


# ---------------------------------------------------------------- for real: react in local sandboxes

def _forge(tmp_path: Path, *args: str) -> dict[str, Any]:
    return forge_json(tmp_path / "sbx", *args)


def _prompts(run_dir: Path, rollout_id: str) -> list[list[int]]:
    with sqlite3.connect(run_dir / "traces.sqlite") as db:
        rows = db.execute("SELECT prompt_token_ids FROM calls WHERE rollout_id = ? ORDER BY seq",
                          (rollout_id,)).fetchall()
    return [json.loads(row[0]) for row in rows]


def _request(run_dir: Path, rollout_id: str, seq: int) -> str:
    with sqlite3.connect(run_dir / "traces.sqlite") as db:
        row = db.execute("SELECT request FROM calls WHERE rollout_id = ? AND seq = ?", (rollout_id, seq)).fetchone()
    return str(row[0]) if row else ""


@pytest.mark.mitm
@pytest.mark.requires("model", "bubblewrap")
def test_react_replays_to_its_last_call_and_a_perturbed_sandbox_diverges(tmp_path: Path, policy_server: Any) -> None:
    upstream = f"proxy.upstream={policy_server.url}"
    run_dir, results = record_react(tmp_path, policy_server.url)
    ran = [r for r in results if r["calls"] >= 2 and "exit_code:" in _request(run_dir, r["rollout_id"], 1)]
    assert ran, [(r["calls"], r["status"]) for r in results]
    source = max(ran, key=lambda r: r["calls"])
    original = _prompts(run_dir, source["rollout_id"])

    faithful = _forge(tmp_path, "rollout", "--replay", f"{run_dir}/{source['rollout_id']}", upstream,
                      "proxy.port=0", f"run.output_dir={tmp_path / 'replay'}")
    assert faithful["faithful"] and faithful["diverged"] is None and faithful["live"] == []
    assert [r["seq"] for r in faithful["replayed"]] == list(range(source["calls"]))
    assert faithful["prompt_tokens_masked"] == 0
    assert (faithful["status"], faithful["reward"]) == (source["status"], source["reward"])
    # the replay's own records: every prompt identical to the recording's, token for token
    assert _prompts(Path(faithful["run_dir"]), faithful["rollout_id"]) == original
    assert json.loads((Path(faithful["run_dir"]) / "replay.json").read_text())["faithful"] is True

    perturbed = _forge(tmp_path, "rollout", "--replay", f"{run_dir}/{source['rollout_id']}", upstream,
                       "proxy.port=0", "harness.env.SHELLOPTS=xtrace", f"run.output_dir={tmp_path / 'perturbed'}")
    assert not perturbed["faithful"] and perturbed["status"] == "infra_error"
    diverged = perturbed["diverged"]
    assert (diverged["call"], diverged["seq"]) == (1, 1), diverged
    assert "+ " in diverged["live"] and "+ " not in diverged["recorded"], diverged  # the shell's trace line
    assert "forge replay diverged at call 1" in perturbed["error"]
    (rollout,) = list(read_run(Path(perturbed["run_dir"])))
    batch = build_batch([rollout], SamplePolicy())
    assert batch.samples == [] and [b.dropped for b in batch.rollouts] == ["infra_error"]


def test_replay_refuses_what_it_cannot_replay(tmp_path: Path) -> None:
    gone = forge("rollout", "--replay", str(tmp_path / "no-run" / "r1"))
    assert gone.returncode == 2 and "RUN_DIR/ROLLOUT_ID" in gone.stderr and "Traceback" not in gone.stderr
    alone = forge("rollout", "--until", "2")
    assert alone.returncode == 2 and "--until goes with --replay" in alone.stderr


@pytest.mark.e2e  # pi in docker, recorded then replayed: ~2 min here (make test-e2e)
@pytest.mark.requires("model", "mitmproxy", "docker", "harness:pi")
def test_pi_in_docker_replays_to_its_last_call_token_for_token(tmp_path: Path, policy_server: Any) -> None:
    # pi's first two calls answered with a call of one of its tools (tests/tool_relay.py): at least three calls,
    # two of them carrying a tool's result
    with ToolRelay(policy_server.url, tool_turns=2) as relay:
        recorded = _forge(tmp_path, "rollout", "+harness=pi", "runtime=docker", f"proxy.upstream={relay.url}",
                          "rollout.max_tasks=1", "rollout.samples_per_task=2", "model.max_output_tokens=96",
                          f"run.output_dir={tmp_path / 'rec'}")
    run_dir = Path(recorded["run_dir"])
    results = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    source = max(results, key=lambda r: r["calls"])
    assert source["calls"] >= 3, [(r["calls"], r["status"], r["error"]) for r in results]
    replayed = _forge(tmp_path, "rollout", "--replay", f"{run_dir}/{source['rollout_id']}",
                      f"proxy.upstream={policy_server.url}", f"run.output_dir={tmp_path / 'replay'}")
    assert replayed["faithful"] and replayed["diverged"] is None, replayed
    assert [r["seq"] for r in replayed["replayed"]] == list(range(source["calls"]))
    assert replayed["prompt_tokens_masked"] == 0
    assert _prompts(Path(replayed["run_dir"]), replayed["rollout_id"]) == _prompts(run_dir, source["rollout_id"])
    assert (replayed["status"], replayed["reward"]) == (source["status"], source["reward"])
