"""Task sources read their formats from data the tests make; unavailable ones say why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forge_cli.config.compose import compose
from forge_cli.envs.registry import load_tasks
from forge_cli.errors import UserError


def _env(*overrides: str):  # type: ignore[no-untyped-def]
    return compose(list(overrides)).experiment.env


def test_builtin_tasks_have_instructions_and_hidden_verifiers() -> None:
    tasks = load_tasks(_env()).tasks
    assert len(tasks) == 7 and len({t.id for t in tasks}) == 7
    for task in tasks:
        assert task.instruction and task.verify
        assert task.verify not in task.instruction


def test_filters_by_id_and_count() -> None:
    assert [t.id for t in load_tasks(_env("env.task_ids=[sum-numbers,hello-file]")).tasks] == [
        "hello-file", "sum-numbers"]
    assert len(load_tasks(_env("env.max_tasks=2")).tasks) == 2
    assert len(load_tasks(_env(), max_tasks=3).tasks) == 3
    with pytest.raises(UserError, match="unknown task id"):
        load_tasks(_env("env.task_ids=[nope]"))


def test_harbor_task_directories(tmp_path: Path) -> None:
    for name in ("b-task", "a-task"):
        task = tmp_path / name
        (task / "tests").mkdir(parents=True)
        (task / "instruction.md").write_text(f"Do {name}.\n")
        (task / "task.toml").write_text('[verifier]\ntimeout_sec = 60.0\n')
        (task / "tests" / "test.sh").write_text("exit 0\n")
    (tmp_path / "not-a-task").mkdir()
    taskset = load_tasks(_env("env=harbor", f"env.path={tmp_path}"))
    assert taskset.available and [t.id for t in taskset.tasks] == ["a-task", "b-task"]
    assert taskset.tasks[0].instruction == "Do a-task." and taskset.tasks[0].verify == "bash /tests/test.sh"
    assert taskset.tasks[0].metadata["task"]["verifier"]["timeout_sec"] == 60.0


def test_osworld_checkout(tmp_path: Path) -> None:
    examples = tmp_path / "evaluation_examples"
    (examples / "examples" / "chrome").mkdir(parents=True)
    (examples / "test_small.json").write_text(json.dumps({"chrome": ["t1", "missing"]}))
    (examples / "examples" / "chrome" / "t1.json").write_text(json.dumps({"id": "t1", "instruction": "Open a tab"}))
    taskset = load_tasks(_env("env=osworld", f"env.path={tmp_path}"))
    assert [(t.id, t.instruction) for t in taskset.tasks] == [("chrome/t1", "Open a tab")]


def test_browser_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"id": "w1", "url": "http://127.0.0.1:1/", "instruction": "Click it",
                                "check": "true"}) + "\n\n")
    (task,) = load_tasks(_env("env=browser", f"env.path={path}")).tasks
    assert task.id == "w1" and "http://127.0.0.1:1/" in task.instruction and task.verify == "true"
    path.write_text("{not json\n")
    with pytest.raises(UserError, match=r"tasks.jsonl:1: not a task"):
        load_tasks(_env("env=browser", f"env.path={path}"))


@pytest.mark.parametrize("env", ["harbor", "claweval", "qwenclawbench", "osworld", "browser"])
def test_unconfigured_sources_say_why(env: str) -> None:
    taskset = load_tasks(_env(f"env={env}"))
    assert not taskset.available and "env.path" in taskset.note
    (placeholder,) = taskset.tasks
    assert placeholder.metadata["placeholder"]
