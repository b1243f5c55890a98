"""`forge rollout` for real: the react harness on builtin tasks in local sandboxes, through the
capture proxy, against the real vLLM server; and how a run survives harnesses that fail."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from forge_cli.paths import forge_home
from tests.helpers import forge

pytestmark = pytest.mark.mitm


def _harness_dir(tmp_path: Path, name: str, yaml_text: str) -> Path:
    config_dir = tmp_path / "configs"
    (config_dir / "harness").mkdir(parents=True, exist_ok=True)
    (config_dir / "harness" / f"{name}.yaml").write_text(yaml_text)
    return config_dir


def _script_harness(tmp_path: Path, name: str, body: str, timeout_s: int = 60) -> Path:
    """A user-provided 'binary' harness: a shell script that answers --version, then does ``body``."""
    script = tmp_path / f"{name}.sh"
    script.write_text(f'#!/bin/sh\n[ "$1" = --version ] && {{ echo "{name} 1.0"; exit 0; }}\n{body}\n')
    script.chmod(0o755)
    return _harness_dir(tmp_path, name, f"""# forge rollout --config-dir DIR +harness={name}
# name
name: {name}
# description
description: test harness that {body}
# package
package: {{manager: binary, name: {name}, version: "1.0"}}
# runtime
runtime: native
# wire API
wire_api: chat_completions
# entry point
entrypoint: {name}
# the program
binary_path: {script}
# command
command: [{name}, "{{{{instruction}}}}"]
# exit codes
exit_codes: {{0: ok}}
# time limit
timeout_s: {timeout_s}
""")


def _run(tmp_path: Path, *overrides: str, config_dir: Path | None = None) -> tuple[int, dict[str, Any], str]:
    """Run the CLI with a FORGE_HOME of its own (no harness bundles) sharing this machine's environments."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    for shared in ("envs", "models"):
        if not (home / shared).exists():
            (home / shared).symlink_to(forge_home() / shared)
    args = ["rollout", "--json", f"run.output_dir={tmp_path / 'runs'}", *overrides]
    if config_dir is not None:
        args += ["--config-dir", str(config_dir)]
    result = forge(*args, env={"FORGE_HOME": str(home), "FORGE_SANDBOX_DIR": str(tmp_path / "sbx")}, timeout=900)
    assert "Traceback" not in result.stderr, result.stderr
    summary = json.loads(result.stdout) if result.returncode == 0 else {}
    return result.returncode, summary, result.stderr


def _results(summary: dict[str, Any]) -> list[dict[str, Any]]:
    lines = (Path(summary["run_dir"]) / "results.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


# the proxy needs some upstream; these harnesses never call it
NO_UPSTREAM = "proxy.upstream=http://127.0.0.1:9"


def test_harness_that_exits_at_once_is_an_agent_error(tmp_path: Path) -> None:
    config_dir = _script_harness(tmp_path, "quitter", "exit 3")
    code, summary, _ = _run(tmp_path, "+harness=quitter", NO_UPSTREAM, "proxy.port=0", "rollout.max_tasks=2",
                            "rollout.samples_per_task=1", config_dir=config_dir)
    assert code == 0
    assert summary["status"] == {"agent_error": 2}
    for result in _results(summary):
        assert result["exit_code"] == 3 and result["reward"] == 0.0 and result["calls"] == 0


def test_harness_that_hangs_times_out_and_the_run_goes_on(tmp_path: Path) -> None:
    config_dir = _script_harness(tmp_path, "sleeper", "sleep 300", timeout_s=2)
    code, summary, _ = _run(tmp_path, "+harness=sleeper", NO_UPSTREAM, "proxy.port=0", "rollout.max_tasks=2",
                            "rollout.samples_per_task=1", config_dir=config_dir)
    assert code == 0
    assert summary["status"] == {"timeout": 2}
    assert summary["duration_s"] < 60
    assert not any((tmp_path / "sbx").rglob("work")), "sandboxes are removed after the run"


def test_bundle_not_installed_prints_the_fix(tmp_path: Path) -> None:
    code, _, stderr = _run(tmp_path, "+harness=pi", NO_UPSTREAM)
    assert code == 1
    assert "harness bundle 'pi' is not installed" in stderr and "forge harness install pi" in stderr


def test_unknown_harness_is_a_config_error(tmp_path: Path) -> None:
    code, _, stderr = _run(tmp_path, "+harness=nosuch")
    assert code == 2 and "unknown option 'nosuch'" in stderr


@pytest.mark.vllm
def test_react_on_builtin_tasks_records_every_call(tmp_path: Path, policy_server: Any) -> None:
    code, summary, stderr = _run(
        tmp_path, 'harness.command=[python3,"{{bundle}}/bin/forge-react",--max-steps,"2","{{instruction}}"]',
        f"proxy.upstream={policy_server.url}", "proxy.port=0", "rollout.max_tasks=2", "rollout.samples_per_task=2",
        "model.max_output_tokens=64")
    assert code == 0, stderr
    results = _results(summary)
    assert len(results) == summary["rollouts"] == 4
    assert {r["status"] for r in results} <= {"ok", "agent_error"} and any(r["status"] == "ok" for r in results)
    # builtin verifiers give partial credit: any number in [0, 1], never None (None: the verifier did not run)
    assert all(r["reward"] is not None and 0.0 <= r["reward"] <= 1.0 for r in results), "the verifier always ran"
    run_dir = Path(summary["run_dir"])
    assert (run_dir / "config.yaml").is_file() and (run_dir / "summary.json").is_file()
    ids = {r["rollout_id"] for r in results}
    with sqlite3.connect(run_dir / "traces.sqlite") as db:
        rows = db.execute("SELECT rollout_id, wire_format, prompt_token_ids, completion_token_ids, "
                          "completion_logprobs, request FROM calls").fetchall()
    assert {row[0] for row in rows} == ids, "every rollout has calls, and nothing else was recorded"
    for result in results:
        mine = [row for row in rows if row[0] == result["rollout_id"]]
        assert len(mine) == result["calls"] >= 1
        for _, wire, prompt_ids, completion_ids, logprobs, request in mine:
            assert wire == "chat"
            assert json.loads(prompt_ids) and json.loads(completion_ids)
            assert len(json.loads(logprobs)) == len(json.loads(completion_ids))
            assert "test \"$(cat" not in request and "tr -d" not in request, "the verifier stays hidden"
        assert (Path(result["logs"]) / "harness.stdout").read_text().strip()
