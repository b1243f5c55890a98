"""The teacher stand-in (`benchmarks/teacher_standin.py`): answers builtin train tasks with their reference solution
through whatever shell-like tool the request offers, refuses val and test tasks, streams like an API; and through
forge's capture proxy and a real harness (pi, local sandbox) its trajectories score reward 1 on train tasks; the
server itself is forge_cli/testing/teacher_standin.py, benchmarks/teacher_standin.py its command-line entry."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import REPO, benchmark_module

standin = benchmark_module("teacher_standin")


@pytest.fixture(scope="module")
def teacher() -> Any:
    return standin.builtin_teacher()


def _train_and_test(teacher: Any) -> tuple[Any, Any]:
    train = next(k for k in teacher.known if k.split == "train")
    test = next(k for k in teacher.known if k.split == "test")
    return train, test


def _tool(name: str, param: str, kind: str = "string") -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": {param: {"type": kind}, "timeout": {"type": "number"}}, "required": [param]}}}


@pytest.mark.parametrize(("tools", "name", "param", "argv"), [
    ([_tool("read", "path"), _tool("bash", "command")], "bash", "command", False),  # pi, mini-swe-agent
    ([_tool("exec_command", "cmd")], "exec_command", "cmd", False),  # Codex
    ([_tool("shell", "command", "array")], "shell", "command", True),  # Codex's older shell tool: an argv
    ([_tool("run_shell_command", "command")], "run_shell_command", "command", False),  # Gemini CLI, Qwen Code
    ([_tool("write", "path"), _tool("terminal_run", "script")], "terminal_run", "script", False),  # by its schema
])
def test_a_train_task_is_answered_with_its_solution_through_the_shell_tool(
        teacher: Any, tools: list[dict[str, Any]], name: str, param: str, argv: bool) -> None:
    train, _ = _train_and_test(teacher)
    body = {"model": "t", "tools": tools, "messages": [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": [{"type": "text", "text": f"Task:\n{train.instruction}\n"}]}]}
    status, answer = teacher.answer(body)
    assert status == 200 and answer["choices"][0]["finish_reason"] == "tool_calls"
    (call,) = answer["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == name
    value = json.loads(call["function"]["arguments"])[param]
    assert value == (["bash", "-lc", train.solution] if argv else train.solution)
    # the tool ran: a short final answer
    body["messages"] += [answer["choices"][0]["message"], {"role": "tool", "tool_call_id": call["id"], "content": ""}]
    status, final = teacher.answer(body)
    assert status == 200 and final["choices"][0]["finish_reason"] == "stop"
    assert final["choices"][0]["message"]["content"]


def test_a_harness_that_asks_for_a_submit_command_gets_it(teacher: Any) -> None:
    train, _ = _train_and_test(teacher)
    system = "When done, run `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` alone."
    body: dict[str, Any] = {"tools": [_tool("bash", "command")], "messages": [
        {"role": "system", "content": system}, {"role": "user", "content": train.instruction}]}
    _, first = teacher.answer(body)
    body["messages"] += [first["choices"][0]["message"], {"role": "tool", "tool_call_id": "a", "content": "ok"}]
    _, second = teacher.answer(body)
    (call,) = second["choices"][0]["message"]["tool_calls"]
    assert json.loads(call["function"]["arguments"])["command"] == "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def test_val_and_test_tasks_and_unknown_ones_are_refused(teacher: Any) -> None:
    for split in ("val", "test"):
        held_out = next(k for k in teacher.known if k.split == split)
        assert held_out.solution is None
        status, error = teacher.answer({"tools": [_tool("bash", "command")],
                                        "messages": [{"role": "user", "content": held_out.instruction}]})
        assert status == 403 and f"a {split} task" in error["error"]["message"], split
    status, _ = teacher.answer({"tools": [_tool("bash", "command")],
                                "messages": [{"role": "user", "content": "Write a poem."}]})
    assert status == 404
    train, _ = _train_and_test(teacher)
    status, error = teacher.answer({"tools": [_tool("read", "path")],
                                    "messages": [{"role": "user", "content": train.instruction}]})
    assert status == 400 and "shell-like tool" in error["error"]["message"]
    refused = {k.task_id for k in teacher.known if k.solution is None}
    assert not refused & set(teacher.served), "nothing held out was ever answered"


def test_it_serves_http_streamed_and_not_with_no_token_ids(teacher: Any) -> None:
    train, test = _train_and_test(teacher)
    body = {"model": "teacher", "tools": [_tool("bash", "command")],
            "messages": [{"role": "user", "content": train.instruction}]}
    with standin.TeacherServer(teacher) as server, httpx.Client(base_url=server.base_url, timeout=30) as client:
        assert client.get("/models").json()["data"][0]["id"] == "teacher"
        plain = client.post("/chat/completions", json=body, headers={"Authorization": "Bearer sk-secret"}).json()
        assert "prompt_token_ids" not in plain and plain["usage"]["prompt_tokens"] > 0
        streamed = client.post("/chat/completions", json={**body, "stream": True,
                                                          "stream_options": {"include_usage": True}})
        events = [json.loads(line[6:]) for line in streamed.text.splitlines()
                  if line.startswith("data: ") and line != "data: [DONE]"]
        assert streamed.text.rstrip().endswith("data: [DONE]")
        (call,) = events[0]["choices"][0]["delta"]["tool_calls"]
        assert json.loads(call["function"]["arguments"])["command"] == train.solution
        assert events[1]["choices"][0]["finish_reason"] == "tool_calls" and events[-1]["usage"]["total_tokens"]
        refused = client.post("/chat/completions", json={**body, "messages": [
            {"role": "user", "content": test.instruction}]})
        assert refused.status_code == 403


@pytest.mark.mitm
@pytest.mark.requires("harness:pi")
def test_pi_through_the_proxy_with_the_teacher_scores_1_on_train_tasks(tmp_path: Path, teacher: Any) -> None:
    """A real harness against the stand-in, as `forge distill` would run it: pi in a local sandbox, its calls
    through forge's capture proxy (stored whole, with no token ids), each train task verified."""
    from forge_cli.paths import forge_home

    home = tmp_path / "home"
    home.mkdir()
    for shared in ("envs", "models", "harnesses"):
        (home / shared).symlink_to(forge_home() / shared)
    with standin.TeacherServer(teacher) as server:
        done = subprocess.run(
            [sys.executable, "-m", "forge_cli", "rollout", "--json", "+harness=pi", "runtime=local",
             f"proxy.upstream={server.base_url.removesuffix('/v1')}", "proxy.port=0", "env.split=train",
             "rollout.max_tasks=3", "rollout.samples_per_task=1", f"run.output_dir={tmp_path / 'runs'}"],
            capture_output=True, text=True, cwd=REPO, timeout=900,
            env={**os.environ, "COLUMNS": "200", "FORGE_HOME": str(home)}, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = Path(json.loads(done.stdout)["run_dir"])
    results = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert len(results) == 3 and all(r["reward"] == 1 for r in results), results
    with sqlite3.connect(run_dir / "traces.sqlite") as db:
        calls = db.execute("SELECT status, request, response, prompt_token_ids FROM calls").fetchall()
    assert len(calls) >= 6, "a tool call and a final answer per rollout"
    for status, request, response, ids in calls:
        assert status == "ok" and json.loads(request)["messages"] and json.loads(response)
        assert not ids, "an API returns no token ids: the record holds the messages and the answer"


def test_a_text_protocol_harness_gets_a_fenced_block_then_finish(teacher: Any) -> None:
    """forge-react --tools text: no tools, a system prompt of fenced bash examples."""
    train, _ = _train_and_test(teacher)
    system = {"role": "system", "content": "Reply with ONE bash code block.\n```bash\necho hi\n```"}
    status, first = teacher.answer({"messages": [system, {"role": "user", "content": train.instruction}]})
    assert status == 200
    assert first["choices"][0]["message"]["content"] == f"```bash\n{train.solution}\n```"
    status, second = teacher.answer({"messages": [system, {"role": "user", "content": train.instruction},
                                                  first["choices"][0]["message"],
                                                  {"role": "user", "content": "OBSERVATION: exit 0"}]})
    assert status == 200 and second["choices"][0]["message"]["content"].startswith("ACTION: finish")
