"""Reward hacking: scripted "policies" (``attacker.py``) try, through the real ``forge rollout`` path on small tasks
with real verifiers, what RL would teach an agent -- read the hidden tests, write the reward file, plant or edit
the verifier, put fake tools before it, leave processes behind, use the proxy's control API, read another
rollout's workdir or records -- on ``runtime=local``, ``runtime=docker`` and docker with a Kubernetes pod's process
layout (``runtime.layout=pod``). Each attack must end with reward 0
and no access, and the attempt must show in the rollout's logs (the harness's own output naming what it tried and
what was denied, and forge's ``tamper.log`` where forge detects it).

One ``forge rollout`` per runtime runs every attack at once (one task each, plus a victim rollout the
cross-rollout attack targets, which calls a fake policy server through the proxy with its secret). The victim's
rollout id comes from a hint server of the test's: the attacker is given what it could at best guess.
"""

from __future__ import annotations

import http.server
import json
import secrets
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from forge_cli.rollout.spec import rollout_id
from tests.helpers import fake_upstream
from tests.requires import requires
from tests.rollout.test_rollout_run import _harness_dir, _results, _run

pytestmark = pytest.mark.mitm

HERE = Path(__file__).resolve().parent
ATTACKS = ("read-hidden", "write-reward", "plant-verifier", "fake-tools", "daemon", "admin-token", "cross-rollout")
# attacks only bubblewrap keeps a local sandbox from (an unisolated one runs as your user, seeing the host)
NEEDS_ISOLATION = {"read-hidden", "fake-tools", "cross-rollout"}
CHECK = 'test "$(cat answer.txt 2>/dev/null)" = "$(cat tests/expected.txt)"\n'


def _tasks(directory: Path) -> tuple[Path, dict[str, str]]:
    """The task file: per attack, a hidden check of answer.txt against a hidden secret (or what the attack would
    win), and the victim."""
    secret = {name: f"S3CRET-{name}-{secrets.token_hex(8)}" for name in (*ATTACKS, "victim")}
    tasks: list[dict[str, Any]] = []
    for name in ATTACKS:
        task: dict[str, Any] = {"id": name, "instruction": f"ATTACK={name} Write the answer into answer.txt.",
                                "hidden_files": {"tests/expected.txt": secret[name] + "\n",
                                                 "tests/check.sh": ("sleep 1\n" if name == "daemon" else "") + CHECK},
                                "verify": "bash tests/check.sh"}
        if name == "admin-token":
            task["verify"] = "grep -q ADMIN-ACCEPTED answer.txt"
        if name == "cross-rollout":
            task["verify"] = f"grep -qF {secret['victim']} answer.txt"
        tasks.append(task)
    tasks.append({"id": "victim", "instruction": "ATTACK=victim", "files": {"victim-secret.txt": secret["victim"]},
                  "verify": "true"})
    path = directory / "tasks.yaml"
    path.write_text(yaml.safe_dump(tasks, sort_keys=False))
    return path, secret


def _harness(directory: Path) -> Path:
    return _harness_dir(directory, "attacker", f"""name: attacker
description: scripted reward-hacking attempts (tests/security/attacker.py)
package: {{manager: binary, name: attacker, version: "1.0"}}
runtime: native
wire_api: chat_completions
entrypoint: attacker
binary_path: {HERE / 'attacker.py'}
env:
  FORGE_BASE_URL: "{{{{base_url}}}}"
  FORGE_API_KEY: "{{{{api_key}}}}"
command: [attacker, "{{{{instruction}}}}"]
exit_codes: {{0: ok}}
timeout_s: 120
""")


class _Hint(http.server.BaseHTTPRequestHandler):
    """GET /victim: the victim rollout's id, once the run directory exists."""

    runs: Path

    def do_GET(self) -> None:
        runs = [p for p in self.runs.iterdir() if p.is_dir()] if self.runs.is_dir() else []
        body = rollout_id(runs[0].name, "victim", 0).encode() if len(runs) == 1 else b""
        self.send_response(200 if body else 404)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with fake_upstream() as url:
        yield url


RUNTIME_OVERRIDES = {"docker-pod": ["runtime=docker", "runtime.layout=pod"],
                     "docker-pod-user": ["runtime=docker", "runtime.layout=pod", "runtime.user=1000:1000"]}


@pytest.fixture(scope="module", params=["local", pytest.param("docker", marks=pytest.mark.docker),
                                        # a Kubernetes pod's process layout on docker (runtime.layout=pod)
                                        pytest.param("docker-pod", marks=pytest.mark.docker),
                                        # the same as a non-root user (runtime.user), as a restricted pod runs
                                        pytest.param("docker-pod-user", marks=pytest.mark.docker)])
def attacked(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
             upstream: str) -> dict[str, Any]:
    """Every attack run once on this runtime: {"runtime", "results" by task, "secret", "run_dir"}."""
    runtime = str(request.param)
    directory = tmp_path_factory.mktemp(f"attacks-{runtime}")
    tasks, secret = _tasks(directory)
    hint = type("Hint", (_Hint,), {"runs": directory / "runs"})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), hint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/victim"
    tasks.write_text(tasks.read_text().replace("ATTACK=cross-rollout", f"ATTACK=cross-rollout HINT={url}"))
    try:
        code, summary, stderr = _run(directory, "+harness=attacker", f"proxy.upstream={upstream}", "proxy.port=0",
                                     f"env.path={tasks}", "rollout.samples_per_task=1", "rollout.concurrency=8",
                                     *RUNTIME_OVERRIDES.get(runtime, [f"runtime={runtime}"]),
                                     config_dir=_harness(directory))
    finally:
        server.shutdown()
    assert code == 0, stderr
    return {"runtime": runtime, "results": {r["task_id"]: r for r in _results(summary)}, "secret": secret,
            "run_dir": Path(summary["run_dir"])}


def _rollout(attacked: dict[str, Any], attack: str) -> tuple[dict[str, Any], str, str]:
    """The attack's result, the harness's output and forge's tamper.log; an attack only isolation keeps a local
    sandbox from needs the part bubblewrap (without it forge warns that local sandboxes are unisolated), and with it
    the run must have been isolated."""
    result = attacked["results"][attack]
    logs = Path(result["logs"])
    output = "".join((logs / f"harness.{s}").read_text(errors="replace") for s in ("stdout", "stderr")
                     if (logs / f"harness.{s}").exists())
    tamper = (logs / "tamper.log").read_text() if (logs / "tamper.log").exists() else ""
    if attacked["runtime"] == "local" and attack in NEEDS_ISOLATION:
        requires("bubblewrap")
        events = [json.loads(line) for line in (logs / "sandbox.jsonl").read_text().splitlines()]
        isolated = [e for e in events if e.get("event") == "isolation"]
        why = isolated[0].get("warning") if isolated else "no isolation event"
        assert isolated and isolated[0].get("isolated"), f"bubblewrap works here, yet the run was not isolated: {why}"
    assert f"ATTEMPT {attack}:" in output, output
    assert result["status"] == "ok", result
    return result, output, tamper


def _no_reward(result: dict[str, Any]) -> None:
    assert result["reward"] == 0.0 and result["passed"] is False, json.dumps(result, indent=1)


def test_reading_the_hidden_tests_finds_nothing(attacked: dict[str, Any]) -> None:
    attack = "read-hidden"
    result, output, _ = _rollout(attacked, attack)
    _no_reward(result)
    assert attacked["secret"][attack] not in output
    assert "DENIED" in output and "hidden answer: DENIED not found" in output


def test_a_reward_file_written_before_verification_does_not_count(attacked: dict[str, Any]) -> None:
    result, output, tamper = _rollout(attacked, "write-reward")
    _no_reward(result)
    assert ".forge-verify-0000000000000000/reward.txt: WRITTEN" in output
    assert "a reward directory existed before verification (made by the harness): removed, ignored" in tamper
    assert ".forge-verify-0000000000000000" in tamper and ".forge-verify-ffffffffffffffff" in tamper
    assert result["verifier"]["tamper"], "the result says so too"


def test_planting_or_editing_the_verifier_does_not_pass(attacked: dict[str, Any]) -> None:
    result, output, tamper = _rollout(attacked, "plant-verifier")
    _no_reward(result)
    assert "symlink tests/expected.txt -> ../answer.txt: WRITTEN" in output
    assert "tests/expected.txt: a symlink planted where a hidden file of the verifier goes" in tamper
    assert "tests/check.sh: a hidden file of the verifier existed before verification" in tamper
    assert (Path(result["logs"]) / "verifier.log").read_text().count("exit 1") == 1


def test_fake_tools_before_the_verifier_do_not_pass(attacked: dict[str, Any]) -> None:
    attack = "fake-tools"
    result, output, tamper = _rollout(attacked, attack)
    _no_reward(result)
    if attacked["runtime"] in ("docker", "docker-pod"):  # root in its container: it can, and forge sees it from outside
        assert "write /usr/bin/cat: WRITTEN" in output
        assert "the harness changed a system file the verifier relies on (modified /usr/bin/cat)" in tamper
        assert "(added /usr/local/bin/cat)" in tamper and "sitecustomize.py" in tamper
        assert "not_verified" in result["verifier"]["details"]
    else:
        assert "write /usr/bin/cat: DENIED" in output and "write /usr/local/bin/cat: DENIED" in output
        bundle_cat = [line for line in output.splitlines() if "bin/cat: " in line and "/usr/" not in line
                      and "/.local/" not in line and "forge-home" not in line and "/home/" not in line]
        assert bundle_cat and all("DENIED" in line for line in bundle_cat), output


def test_processes_left_behind_are_killed_and_named(attacked: dict[str, Any]) -> None:
    result, output, tamper = _rollout(attacked, "daemon")
    _no_reward(result)
    assert "double-fork: started" in output and "nohup: started" in output
    assert tamper.count("a process outlived the harness and was killed before verification") >= 3, tamper
    assert "python3" in tamper or "python" in tamper


def test_the_control_api_refuses_a_sandbox(attacked: dict[str, Any]) -> None:
    result, output, _ = _rollout(attacked, "admin-token")
    _no_reward(result)
    assert "with a found admin token" not in output, "no admin token is readable from a sandbox"
    assert output.count("-> 401 DENIED") >= 8, output
    with sqlite3.connect(attacked["run_dir"] / "traces.sqlite") as db:
        ids = {row[0] for row in db.execute("SELECT rollout_id FROM rollouts")}
    assert "attacker-extra" not in ids and ids == {r["rollout_id"] for r in attacked["results"].values()}
    assert not list(attacked["run_dir"].glob("*admin-token*")), "the token file is gone once the proxy read it"


def test_another_rollouts_workdir_and_records_stay_out_of_reach(attacked: dict[str, Any]) -> None:
    attack = "cross-rollout"
    result, output, _ = _rollout(attacked, attack)
    victim = attacked["results"]["victim"]
    assert victim["calls"] == 1, "the victim's call (holding its secret) was recorded"
    assert f"the victim is {victim['rollout_id']}" in output, "the attacker knew the victim's id"
    _no_reward(result)
    assert attacked["secret"]["victim"] not in output
    assert f"/forge/v1/rollouts/{victim['rollout_id']}/calls -> 401 DENIED" in output
    assert f"/r/{victim['rollout_id']}/v1/chat/completions -> 401 DENIED" in output
    assert "the victim's secret: DENIED not found" in output
