"""Fixtures for the task-tools tests: the shipped mail task and a running tool server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from forge_cli.config.compose import compose
from forge_cli.envs.source import load_tasks
from forge_cli.envs.task import Task
from forge_cli.tools.server import ToolServer
from tests.helpers import EXAMPLE_TASKS


@pytest.fixture(scope="session")
def mail_task() -> Task:
    """builtin's mail-reply task: three mailbox tools on forge's builtin per-rollout service."""
    tasks = load_tasks(compose([f"env.path={EXAMPLE_TASKS}", "env.task_ids=[mail-reply]"]).experiment.env).tasks
    assert [t.id for t in tasks] == ["mail-reply"]
    return tasks[0]


@pytest.fixture
def tool_server() -> Iterator[ToolServer]:
    with ToolServer("127.0.0.1", 0) as server:
        yield server
