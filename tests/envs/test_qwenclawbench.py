"""`env=qwenclawbench` without a QwenClawBench checkout: forge's own sample tasks in its format and a stand-in of its
``lib_tasks`` / ``lib_grading`` (``tests/envs/qwenclawbench_tasks/``, see its README), run through the real
``react`` harness (and, in ``make test-e2e``, the real ``openclaw`` one, whose own session database is the
transcript) and the capture proxy by a scripted policy (``qwenclawbench_policy.py``). The real checkout is
``test_qwenclawbench_real.py``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from forge_cli.config.compose import compose
from forge_cli.envs.qwenclawbench.transcript import from_records
from forge_cli.envs.source import load_tasks
from forge_cli.errors import UserError
from forge_cli.paths import forge_home
from tests.envs.qwenclawbench_policy import OPENCLAW_SCRIPTS, SAMPLE_SCRIPTS, Policy, serve
from tests.helpers import forge
from tests.requires import requires

SAMPLES = Path(__file__).parent / "qwenclawbench_tasks"
DOWN = "http://127.0.0.1:9/v1"


def _load(*overrides: str) -> Any:
    return load_tasks(compose(["env=qwenclawbench", *overrides]).experiment.env)


def test_sample_tasks_load_with_workspace_files() -> None:
    tasks = {t.id: t for t in _load(f"env.path={SAMPLES}").tasks}
    assert sorted(tasks) == ["task_s01_sales_total", "task_s02_port_change", "task_s03_tool_trace",
                             "task_s04_grader_raises"]
    sales = tasks["task_s01_sales_total"]
    assert sales.files == {"data/sales.csv": b"region,amount\nnorth,10\nsouth,20\neast,30\n"}
    assert sales.instruction.startswith("Add up the amount column") and sales.timeout_s == 120
    assert sales.category == "Data Analysis" and sales.verifier is not None
    assert tasks["task_s02_port_change"].files == {"config.yaml": "server:\n  host: 0.0.0.0\n  port: 8080\n"}
    assert "hybrid" in str(tasks["task_s02_port_change"].verify)


@pytest.mark.parametrize(("overrides", "needle"), [
    ([], "needs env.path"),
    (["env.path=/nonexistent/qcb"], "does not exist"),
    ([f"env.path={SAMPLES / 'scripts'}"], "is not a QwenClawBench checkout"),
    ([f"env.path={SAMPLES}", "env.task_ids=[task_nope]"], "unknown task id(s) task_nope"),
])
def test_bad_input_is_exit_2(overrides: list[str], needle: str) -> None:
    with pytest.raises(UserError) as raised:
        _load(*overrides)
    assert raised.value.exit_code == 2 and needle in str(raised.value)


def test_bad_input_on_the_command_line_is_one_message() -> None:
    result = forge("eval", "+env=qwenclawbench", "env.path=/nonexistent/qcb")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "/nonexistent/qcb does not exist" in result.stderr


def test_chat_records_become_an_openclaw_session() -> None:
    tool_call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    first = {"role": "assistant", "content": None, "tool_calls": [tool_call]}
    records = [
        {"status": "ok", "wire_format": "chat", "prompt_tokens": 7, "completion_tokens": 2,
         "request": {"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "do it"}]},
         "response": {"choices": [{"message": first, "finish_reason": "tool_calls"}]}},
        {"status": "ok", "wire_format": "chat", "prompt_tokens": 9, "completion_tokens": 3,
         "request": {"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "do it"}, first,
                                  {"role": "tool", "tool_call_id": "c1", "content": "a.txt"}]},
         "response": {"choices": [{"message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}]}},
    ]
    entries = from_records(records, "r1")
    assert entries[0]["type"] == "session"
    msgs = [e["message"] for e in entries[1:]]
    assert [m["role"] for m in msgs] == ["user", "assistant", "toolResult", "assistant"]
    assert msgs[1]["content"] == [{"type": "toolCall", "id": "c1", "name": "bash", "arguments": {"command": "ls"}}]
    assert msgs[2]["toolName"] == "bash" and msgs[2]["content"][0]["text"] == "a.txt"
    assert msgs[3]["content"] == [{"type": "text", "text": "done"}] and msgs[3]["usage"]["input"] == 9


def _eval(tmp_path: Path, upstream: str, *args: str, timeout: float = 900) -> tuple[int, Any, str]:
    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    for shared in ("envs", "models", "harnesses"):
        if not (home / shared).exists() and (forge_home() / shared).exists():
            (home / shared).symlink_to(forge_home() / shared)
    result = forge("eval", "--json", "+env=qwenclawbench", f"env.path={SAMPLES}", f"proxy.upstream={upstream}",
                   "proxy.port=0", f"run.output_dir={tmp_path / 'runs'}", "eval.retries=0", *args,
                   env={"FORGE_HOME": str(home), "FORGE_SANDBOX_DIR": str(tmp_path / "sbx")}, timeout=timeout)
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result.returncode, json.loads(result.stdout) if result.returncode == 0 else None, result.stderr


def _trials(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["task_id"]: t for task in report["tasks"] for t in task["trials"]}


@pytest.mark.mitm
def test_reference_policy_through_react_scores_1(tmp_path: Path) -> None:
    policy = Policy(SAMPLE_SCRIPTS)
    with serve(policy) as url:
        code, report, stderr = _eval(
            tmp_path, url, "env.task_ids=[task_s01_sales_total,task_s02_port_change,task_s03_tool_trace]",
            "eval.trials=2", f"env.options.judge.base_url={url}/v1", "env.options.judge.model=judge")
    assert code == 0, stderr[-3000:]
    trials = [t for task in report["tasks"] for t in task["trials"]]
    assert len(trials) == 6 and all(t["reward"] == 1.0 and t["passed"] for t in trials), trials
    assert policy.judge_calls == 4, "the two hybrid tasks were judged, twice each"
    bench = report["meta"]["benchmark"]
    assert bench["summary"]["mean_score"] == 1.0 and bench["summary"]["pass^2"] == 1.0
    assert bench["summary"]["tasks_completed"] == 3 and bench["summary"]["left_out"] == {}
    batch = Path(bench["dir"])
    saved = json.loads((batch / "task_s01_sales_total_run_1" / "transcript.json").read_text())
    roles = [e["message"]["role"] for e in saved if e.get("type") == "message"]
    assert roles[0] == "user" and "toolResult" in roles and "assistant" in roles
    grading = json.loads((batch / "task_s02_port_change_run_2" / "grading.json").read_text())
    assert grading["score"] == 1.0 and grading["grading_type"] == "hybrid"
    assert (batch / "task_s01_sales_total_run_2" / "workspace" / "total.txt").read_text() == "60\n"
    assert json.loads((batch / "summary.json").read_text())["mean_score"] == 1.0


@pytest.mark.mitm
def test_doing_nothing_fails_judge_down_is_not_judged_and_a_grader_bug_is_an_infra_error(tmp_path: Path) -> None:
    with serve(Policy(SAMPLE_SCRIPTS, lazy=True)) as url:
        code, report, stderr = _eval(tmp_path / "lazy", url, "env.options.judge.retries=1",
                                     "env.task_ids=[task_s01_sales_total,task_s02_port_change]",
                                     f"env.options.judge.base_url={DOWN}")
    assert code == 0, stderr[-3000:]
    lazy = _trials(report)
    assert lazy["task_s01_sales_total"]["passed"] is False and lazy["task_s01_sales_total"]["reward"] == 0.0
    # automated part below 0.75: the judge's part counts 0 whatever it says, so it is scored without it
    assert lazy["task_s02_port_change"]["passed"] is False
    assert 0 < lazy["task_s02_port_change"]["reward"] < 0.75

    with serve(Policy(SAMPLE_SCRIPTS)) as url:
        code, report, stderr = _eval(tmp_path / "down", url, "env.options.judge.retries=2",
                                     "env.options.judge.retry_base_s=0",
                                     "env.task_ids=[task_s02_port_change,task_s04_grader_raises]",
                                     f"env.options.judge.base_url={DOWN}")
    assert code == 0, stderr[-3000:]
    down = _trials(report)
    port = down["task_s02_port_change"]
    assert port["status"] == "ok" and port["passed"] is None and port["reward"] is None
    assert "not judged" in port["error"] and "did not answer after 2 attempt(s)" in port["error"]
    raised = down["task_s04_grader_raises"]
    assert raised["status"] == "infra_error" and "grader bug" in raised["error"]
    assert "Traceback" in (Path(raised["logs"]) / "verifier.log").read_text()
    left_out = report["meta"]["benchmark"]["summary"]["left_out"]
    assert "not judged" in left_out["task_s02_port_change"] and "infra error" in left_out["task_s04_grader_raises"]
    assert report["meta"]["benchmark"]["summary"]["mean_score"] is None


def openclaw_installed() -> None:
    """The machine's OpenClaw bundle (the test shares ``$FORGE_HOME/harnesses``), which only make test-e2e installs."""
    requires("harness:openclaw")


@pytest.mark.e2e  # OpenClaw's bundle (~790 MB) is installed by make test-e2e, not make test
@pytest.mark.mitm
def test_reference_policy_through_openclaw_scores_1_on_its_own_session(tmp_path: Path) -> None:
    """The real OpenClaw harness (its bundle, local sandbox): QwenClawBench grades OpenClaw's own session, read from
    its session database in the sandbox (a zstd-compressed event included), not one converted from the records."""
    openclaw_installed()
    policy = Policy(OPENCLAW_SCRIPTS, finish=None)
    with serve(policy) as url:
        code, report, stderr = _eval(
            tmp_path, url, "harness=openclaw", "model.max_model_len=32768",
            "env.task_ids=[task_s01_sales_total,task_s02_port_change,task_s03_tool_trace]",
            f"env.options.judge.base_url={url}/v1", "env.options.judge.model=judge")
    assert code == 0, stderr[-3000:]
    trials = [t for task in report["tasks"] for t in task["trials"]]
    assert len(trials) == 3 and all(t["reward"] == 1.0 and t["passed"] for t in trials), trials
    assert policy.judge_calls == 2, "the two hybrid tasks were judged"
    for trial in trials:
        log = (Path(trial["logs"]) / "verifier.log").read_text()
        assert "transcript: openclaw session database" in log, log[-2000:]
    batch = Path(report["meta"]["benchmark"]["dir"])
    saved = json.loads((batch / "task_s03_tool_trace" / "transcript.json").read_text())
    assert saved[0]["type"] == "session" and "forge" not in str(saved[0].get("source"))
    messages = [e["message"] for e in saved if e.get("type") == "message"]
    calls = [p["name"] for m in messages if m["role"] == "assistant" for p in m["content"] if p["type"] == "toolCall"]
    assert calls == ["read", "exec", "exec"]
    assert any("10400" in str(m["content"]) for m in messages if m["role"] == "toolResult"), "the compressed event"
