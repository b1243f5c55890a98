"""`forge rollout` on the tools task with a script harness that uses its skill file (local sandboxes, real proxy):
the tool server starts for the run, dispatches are recorded per rollout and the hidden verifier reads the state."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import EXAMPLE_TASKS
from tests.rollout.test_rollout_run import NO_UPSTREAM, _results, _run, _script_harness

pytestmark = pytest.mark.mitm

CALL = 'python3 "$HOME/forge-tools/call.py"'
REPLY = (f"{CALL} list_inbox >/dev/null && {CALL} read_email '{{\"id\": \"2\"}}' >/dev/null && "
         f"{CALL} send_email '{{\"to\": \"alice@example.com\", \"subject\": \"Re\", \"body\": \"Room 4B\"}}'")


def _sourcing(tmp_path: Path, name: str, body: str) -> Path:
    """A script harness that runs ``body`` from a file (the harness YAML quotes none of it)."""
    (tmp_path / f"{name}.body.sh").write_text(body + "\n")
    return _script_harness(tmp_path, name, f". {tmp_path}/{name}.body.sh")


# the harness sources its body from tmp_path on the host, which an isolated local sandbox cannot see
# (tests/runtime/test_isolation.py): these tests are about the tool server, so their sandboxes are not isolated
HOST_VISIBLE = "runtime.isolation=none"


def test_tools_task_through_forge_rollout(tmp_path: Path) -> None:
    config_dir = _sourcing(tmp_path, "mailer", REPLY)
    code, summary, stderr = _run(tmp_path, "+harness=mailer", NO_UPSTREAM, "proxy.port=0", f"env.path={EXAMPLE_TASKS}",
                                 "env.task_ids=[mail-reply]",
                                 "rollout.samples_per_task=2", HOST_VISIBLE, config_dir=config_dir)
    assert code == 0, stderr
    results = _results(summary)
    assert len(results) == 2 and len({r["rollout_id"] for r in results}) == 2
    for result in results:
        assert result["status"] == "ok", result["error"]
        assert result["reward"] == 1.0, result["verifier"]
        assert result["tool_calls"] == 3
        assert result["tools"]["by_tool"] == {"list_inbox": 1, "read_email": 1, "send_email": 1}
        records = [json.loads(line) for line in (Path(result["logs"]) / "tool_calls.jsonl").read_text().splitlines()]
        assert [(r["seq"], r["tool"], r["transport"], r["is_error"]) for r in records] == [
            (0, "list_inbox", "rest", False), (1, "read_email", "rest", False), (2, "send_email", "rest", False)]


def test_tools_task_unsolved_gets_reward_zero(tmp_path: Path) -> None:
    config_dir = _sourcing(tmp_path, "idler", f"{CALL} list_inbox")
    code, summary, stderr = _run(tmp_path, "+harness=idler", NO_UPSTREAM, "proxy.port=0", f"env.path={EXAMPLE_TASKS}",
                                 "env.task_ids=[mail-reply]",
                                 "rollout.samples_per_task=1", "tools.port=0", HOST_VISIBLE, config_dir=config_dir)
    assert code == 0, stderr
    (result,) = _results(summary)
    assert result["status"] == "ok" and result["reward"] == 0.0 and result["tool_calls"] == 1
