"""What a rollout's verification guarantees, through `forge rollout` with scripted harnesses (no model needed):
a verifier that crashes is an infra error with its traceback in the log, never reward 0; nothing the harness left
running can act on the workspace or the reward after it exited; hidden files reach the verifier but were never
visible to the harness (in docker); group ids are unique per batch and results carry step, sample and weight
version; the run reader joins results with records."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from forge_cli.envs.verifier import Score, VerifyContext
from tests.rollout.test_rollout_run import NO_UPSTREAM, _results, _run, _script_harness

pytestmark = pytest.mark.mitm


def _tasks(tmp_path: Path, *tasks: dict[str, Any]) -> str:
    path = tmp_path / "tasks.yaml"
    path.write_text(yaml.safe_dump(list(tasks), sort_keys=False))
    return str(path)


def crashes(ctx: VerifyContext) -> float:
    raise RuntimeError("grader lost its rubric")


async def late_answer(ctx: VerifyContext) -> Score:
    """Waits long enough for a process the harness left behind to have written answer.txt, then reads it."""
    await asyncio.sleep(3)
    text = (await ctx.read_text("answer.txt") or "").strip()
    return Score(reward=1.0 if text == "42" else 0.0, passed=text == "42", details={"answer": text})


def test_a_crashing_verifier_is_an_infra_error_with_its_traceback(tmp_path: Path) -> None:
    config_dir = _script_harness(tmp_path, "doer", "echo 42 > answer.txt")
    tasks = _tasks(tmp_path, {"id": "crash", "instruction": "Answer.",
                              "verifier": {"kind": "python",
                                           "function": "tests.rollout.test_verification:crashes"}})
    code, summary, stderr = _run(tmp_path, "+harness=doer", NO_UPSTREAM, "proxy.port=0", f"env.path={tasks}",
                                 "rollout.samples_per_task=2", config_dir=config_dir)
    assert code == 0, stderr
    assert summary["status"] == {"infra_error": 2} and summary["mean_reward"] is None
    for result in _results(summary):
        assert result["reward"] is None and result["passed"] is None and "verifier failed" in result["error"]
        log = (Path(result["logs"]) / "verifier.log").read_text()
        assert "Traceback" in log and "grader lost its rubric" in log


@pytest.mark.parametrize(("runtime", "detach"), [("local", ""), ("local", "setsid "),
                                                 pytest.param("docker", "setsid ", marks=pytest.mark.docker)])
def test_processes_the_harness_leaves_behind_are_killed_before_verification(tmp_path: Path, runtime: str,
                                                                             detach: str) -> None:
    # the harness exits at once, leaving a process (in its group, or a new session) that writes the answer later
    config_dir = _script_harness(tmp_path, "sneaky", f"{detach}sh -c 'sleep 1.5; echo 42 > answer.txt' "
                                                     ">/dev/null 2>&1 </dev/null & exit 0")
    tasks = _tasks(tmp_path, {"id": "late", "instruction": "Answer.",
                              "verifier": {"kind": "python",
                                           "function": "tests.rollout.test_verification:late_answer"}})
    code, summary, stderr = _run(tmp_path, "+harness=sneaky", NO_UPSTREAM, "proxy.port=0", f"env.path={tasks}",
                                 "rollout.samples_per_task=1", f"runtime={runtime}", config_dir=config_dir)
    assert code == 0, stderr
    (result,) = _results(summary)
    assert result["status"] == "ok" and result["reward"] == 0.0, result
    assert result["verifier"]["details"]["answer"] == ""


def test_groups_are_unique_per_batch_and_results_say_step_and_sample(tmp_path: Path) -> None:
    from forge_cli.rollout.reader import read_run

    config_dir = _script_harness(tmp_path, "doer", "echo 42 > answer.txt")
    tasks = _tasks(tmp_path, *({"id": f"t{i}", "instruction": "Answer.", "verify": "grep -qx 42 answer.txt"}
                               for i in range(2)))
    code, summary, stderr = _run(tmp_path, "+harness=doer", NO_UPSTREAM, "proxy.port=0", f"env.path={tasks}",
                                 "rollout.samples_per_task=3", config_dir=config_dir)
    assert code == 0, stderr
    results = _results(summary)
    assert summary["status"] == {"ok": 6} and summary["mean_reward"] == 1.0
    groups = {r["task_id"]: {r["group_id"] for r in results if r["task_id"] == r["task_id"]} for r in results}
    assert len({g for gs in groups.values() for g in gs}) == 2, "one group per task in the batch"
    assert all(r["group_id"] != r["task_id"] for r in results)
    assert sorted(r["sample"] for r in results if r["task_id"] == "t0") == [0, 1, 2]
    assert all(r["step"] == 0 and r["passed"] is True for r in results)
    joined = list(read_run(Path(summary["run_dir"])))
    assert len(joined) == 6 and all(j.calls == [] for j in joined), "scripted harnesses make no model calls"


@pytest.mark.docker
def test_hidden_files_reach_the_verifier_but_never_the_harness(tmp_path: Path) -> None:
    # the harness looks for the hidden asset everywhere it could be and records what it saw
    config_dir = _script_harness(tmp_path, "looker", "ls /tests > seen.txt 2>&1; cat /tests/expected.txt >> seen.txt "
                                                     "2>&1; echo 42 > answer.txt")
    tasks = _tasks(tmp_path, {"id": "hidden", "instruction": "Answer.",
                              "hidden_files": {"/tests/expected.txt": "42\n"},
                              "verify": "grep -qx \"$(cat /tests/expected.txt)\" answer.txt && "
                                        "! grep -q 42 seen.txt"})
    code, summary, stderr = _run(tmp_path, "+harness=looker", NO_UPSTREAM, "proxy.port=0", f"env.path={tasks}",
                                 "rollout.samples_per_task=1", "runtime=docker", config_dir=config_dir)
    assert code == 0, stderr
    (result,) = _results(summary)
    assert result["status"] == "ok" and result["reward"] == 1.0, json.dumps(result, indent=1)


SERVICE = """import http.server, os, sys
state = os.path.join(os.getcwd(), "hits")
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/hit":
            with open(state, "a") as f:
                f.write("x")
        body = str(os.path.getsize(state) if os.path.exists(state) else 0).encode()
        self.send_response(200); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def test_env_services_per_rollout_reach_harness_and_verifier(tmp_path: Path) -> None:
    """Each rollout gets its own service (own port, own state): the harness calls it, the verifier reads its
    state; two concurrent rollouts never see each other's hits; the service's log is in the rollout directory."""
    import sys

    service = tmp_path / "service.py"
    service.write_text(SERVICE)
    config_dir = _script_harness(tmp_path, "caller", 'python3 -c "import os, urllib.request; '
                                                     "urllib.request.urlopen(os.environ['FORGE_SERVICE_COUNTER_URL']"
                                                     " + '/hit').read()\"")
    tasks = _tasks(tmp_path, {"id": "svc", "instruction": "Call the service.",
                              "verify": 'test "$(python3 -c "import os, urllib.request; print(urllib.request.urlopen('
                                        "os.environ['FORGE_SERVICE_COUNTER_URL']).read().decode())\")\" = 1"})
    code, summary, stderr = _run(
        tmp_path, "+harness=caller", NO_UPSTREAM, "proxy.port=0", f"env.path={tasks}", "rollout.samples_per_task=2",
        f"+env.services=[{{name: counter, command: [{sys.executable}, {service}, '{{port}}']}}]",
        config_dir=config_dir)
    assert code == 0, stderr
    results = _results(summary)
    assert [r["reward"] for r in results] == [1.0, 1.0], results
    for result in results:
        assert (Path(result["logs"]) / "services" / "counter.log").is_file()
