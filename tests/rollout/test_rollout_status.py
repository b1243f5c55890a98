"""A rollout's status from its recorded calls: refused as too long for the served context -> ``over_length``; the
policy server not answering -> ``infra_error``; never ``agent_error`` with reward 0. Pinned on hand-made records
(vLLM 0.32's own messages), then for real: a harness replaying Gemini CLI's recorded ~11,000-token first request
through the proxy to vLLM at 8,192 tokens, and a harness whose policy server is not there."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from forge_cli.paths import forge_home
from forge_cli.rollout.result import ending_status
from tests.helpers import forge

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "harness_requests"

# vLLM 0.32's answers to a prompt that does not fit (renderers/params.py, v1/engine/input_processor.py,
# entrypoints/serve/utils/api_utils.py), as the proxy records them
TOO_LONG = [
    "upstream answered 400: This model's maximum context length is 8192 tokens. However, your prompt contains at "
    "least 8193 input tokens, which exceeds this limit even without any output tokens. Please reduce the length of "
    "the input prompt.",
    "upstream answered 400: The decoder prompt (length 11064) is longer than the maximum model length of 8192. Make "
    "sure that `max_model_len` is no smaller than the number of text tokens.",
    "upstream answered 400: Input length (11064) exceeds model's maximum context length (8192).",
]


def call(seq: int, status: str = "ok", http_status: int | None = 200, error: str | None = None) -> dict[str, Any]:
    return {"seq": seq, "status": status, "http_status": http_status, "error": error}


@pytest.mark.parametrize("message", TOO_LONG)
def test_a_call_refused_as_too_long_makes_the_rollout_over_length(message: str) -> None:
    calls = [call(0), call(1, "upstream_error", 400, message)]
    for harness_status in ("agent_error", "ok", "timeout"):
        status, why = ending_status(harness_status, calls)
        assert status == "over_length"
        assert why is not None and "call 1" in why and message in why and "model.max_model_len" in why


def test_the_calls_after_the_last_ok_one_decide() -> None:
    refused = call(1, "upstream_error", 400, TOO_LONG[0])
    # the harness recovered (compaction, a shorter retry): its own status stands
    assert ending_status("agent_error", [call(0), refused, call(2)]) == ("agent_error", None)
    # an order by seq, not by arrival in the list
    assert ending_status("agent_error", [call(2), refused, call(0)]) == ("agent_error", None)
    # a 400 for another reason is the agent's
    bad = call(1, "upstream_error", 400, "upstream answered 400: 'messages' must be a list")
    assert ending_status("agent_error", [call(0), bad]) == ("agent_error", None)
    # a client that gave up is not the policy server's fault
    assert ending_status("agent_error", [call(0, "client_abort", None, "client disconnected")]) == ("agent_error",
                                                                                                   None)
    # a sandbox that died stays an infra error; no calls: nothing changes
    assert ending_status("infra_error", [refused]) == ("infra_error", None)
    assert ending_status("ok", []) == ("ok", None)


def test_a_policy_server_that_does_not_answer_is_an_infra_error() -> None:
    gone = call(3, "upstream_error", 502, "[Errno 111] Connection refused")
    status, why = ending_status("agent_error", [call(0), gone])
    assert status == "infra_error" and why == ("the policy server did not answer call 3 (HTTP 502: [Errno 111] "
                                               "Connection refused)")
    assert ending_status("timeout", [call(0, "upstream_error", 500, "EngineCore died")])[0] == "infra_error"
    # a refusal for length wins over a later connection failure (the prompt would not have fit anyway)
    assert ending_status("agent_error", [call(0, "upstream_error", 400, TOO_LONG[1]), gone])[0] == "over_length"


# ---------------------------------------------------------------------------------------------- for real

def _replay_harness(tmp_path: Path, name: str, path: str, body: dict[str, Any], header: str) -> Path:
    """A user-provided harness that sends ``body`` to ``path`` under its rollout's proxy root and exits 1 when the
    answer is an error (what Gemini CLI does after a refused call)."""
    (tmp_path / "body.json").write_text(json.dumps(body))
    script = tmp_path / f"{name}.py"
    script.write_text(f'''import json, os, sys, urllib.error, urllib.request
if sys.argv[1:] == ["--version"]:
    print("{name} 1.0"); sys.exit(0)
body = open({str(tmp_path / "body.json")!r}, "rb").read()
request = urllib.request.Request(os.environ["ROOT"] + {path!r}, data=body, method="POST",
                                 headers={{"content-type": "application/json", {header!r}: os.environ["KEY"]}})
try:
    print(urllib.request.urlopen(request, timeout=600).read()[:300])
except urllib.error.HTTPError as error:
    print("HTTP", error.code, error.read()[:500], file=sys.stderr)
    sys.exit(1)
''')
    launcher = tmp_path / name
    launcher.write_text(f"#!/bin/sh\nexec python3 {script} \"$@\"\n")
    launcher.chmod(0o755)
    config_dir = tmp_path / "configs"
    (config_dir / "harness").mkdir(parents=True)
    (config_dir / "harness" / f"{name}.yaml").write_text(f"""# forge rollout --config-dir DIR +harness={name}
# name
name: {name}
# description
description: replays one recorded request
# package
package: {{manager: binary, name: {name}, version: "1.0"}}
# runtime
runtime: native
# wire API
wire_api: gemini
# entry point
entrypoint: {name}
# the program
binary_path: {launcher}
# command
command: [{name}]
# environment
env: {{ROOT: "{{{{base_url_root}}}}", KEY: "{{{{api_key}}}}"}}
# exit codes
exit_codes: {{0: ok, 1: agent_error}}
# time limit
timeout_s: 600
""")
    return config_dir


def _rollout(tmp_path: Path, config_dir: Path, *overrides: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """One rollout through forge rollout (own FORGE_HOME, this machine's environments); its summary and result."""
    home = tmp_path / "home"
    home.mkdir()
    for shared in ("envs", "models"):
        (home / shared).symlink_to(forge_home() / shared)
    result = forge("rollout", "--json", f"run.output_dir={tmp_path / 'runs'}", "--config-dir", str(config_dir),
                   "+harness=replay", "proxy.port=0", "rollout.max_tasks=1", "rollout.samples_per_task=1",
                   # the replay harness and its request body live in tmp_path on the host, which an isolated local
                   # sandbox cannot see (tests/runtime/test_isolation.py): these tests are about statuses
                   "runtime.isolation=none", *overrides,
                   env={"FORGE_HOME": str(home), "FORGE_SANDBOX_DIR": str(tmp_path / "sbx")},
                   timeout=900)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    summary = json.loads(result.stdout)
    (line,) = (Path(summary["run_dir"]) / "results.jsonl").read_text().splitlines()
    return summary, json.loads(line)


@pytest.mark.mitm
def test_a_rollout_whose_policy_server_is_gone_is_an_infra_error(tmp_path: Path) -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "hello"}]}]}
    config_dir = _replay_harness(tmp_path, "replay", "/v1beta/models/policy:generateContent", body,
                                 "x-goog-api-key")
    summary, result = _rollout(tmp_path, config_dir, "proxy.upstream=http://127.0.0.1:9")
    assert summary["status"] == {"infra_error": 1}
    assert result["exit_code"] == 1 and result["reward"] is None and result["passed"] is None
    assert result["error"].startswith("the policy server did not answer call 0 (HTTP 502")


@pytest.mark.mitm
@pytest.mark.vllm
def test_gemini_clis_first_request_refused_by_an_8k_server_is_over_length(tmp_path: Path,
                                                                          policy_server: Any) -> None:
    """The issue's case: Gemini CLI's own ~11,000-token first request against the default 8,192-token context."""
    recorded = json.loads((FIXTURES / "gemini-cli.json").read_text())
    path = recorded["path"].removeprefix("/r/rec0001")
    config_dir = _replay_harness(tmp_path, "replay", path, recorded["body"], "x-goog-api-key")
    summary, result = _rollout(tmp_path, config_dir, f"proxy.upstream={policy_server.url}")
    assert summary["status"] == {"over_length": 1}, result
    assert result["exit_code"] == 1 and result["calls"] == 1
    assert result["error"].startswith("the policy server refused call 0 as too long for its context")
    assert "maximum context length is 8192" in result["error"] or "maximum model length of 8192" in result["error"]
    with sqlite3.connect(Path(summary["run_dir"]) / "traces.sqlite") as db:
        ((status, http_status),) = db.execute("SELECT status, http_status FROM calls").fetchall()
    assert (status, http_status) == ("upstream_error", 400)
