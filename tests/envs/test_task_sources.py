"""Task sources: the registry, splits and filters, the sources that cannot run, and the source conformance suite."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from forge_cli.envs.resolve import compose_resolved
from forge_cli.envs.source import SOURCES, TaskSource, known_sources, load_tasks, source_class
from forge_cli.envs.verifier import Verifier
from forge_cli.errors import ConfigError, UserError
from tests.helpers import EXAMPLE_TASKS


def _env(*overrides: str) -> Any:
    return compose_resolved(list(overrides)).experiment.env


def test_filters_by_id_and_count() -> None:
    env = [f"env.path={EXAMPLE_TASKS}"]
    assert [t.id for t in load_tasks(_env(*env, "env.task_ids=[sum-numbers,hello-file]")).tasks] == [
        "hello-file", "sum-numbers"]
    assert len(load_tasks(_env(*env, "env.max_tasks=2")).tasks) == 2
    assert len(load_tasks(_env(*env), max_tasks=3).tasks) == 3
    with pytest.raises(UserError, match="unknown task id") as raised:
        load_tasks(_env(*env, "env.task_ids=[nope]"))
    assert raised.value.exit_code == 2


def test_unknown_split_is_exit_2_with_the_splits() -> None:
    with pytest.raises(UserError, match="unknown split 'validation'") as raised:
        load_tasks(_env("env.split=validation"))
    assert raised.value.exit_code == 2 and "train" in (raised.value.fix or "")


def test_default_split_follows_the_purpose() -> None:
    assert load_tasks(_env(), purpose="eval").split == "test"
    assert load_tasks(_env(), purpose="train").split == "train"
    assert load_tasks(_env("env.split=train"), purpose="eval").split == "train"


def test_unknown_source_and_bad_options_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown task source 'nosuch'"):
        compose_resolved(["env.source=nosuch"])
    with pytest.raises(ConfigError, match=r"env\.options"):
        compose_resolved(["+env.options.no_such_option=1"])


def test_a_users_own_source_by_dotted_path() -> None:
    env = _env("env.source=tests.envs.test_task_sources:OneTaskSource")
    (task,) = load_tasks(env).tasks
    assert task.id == "only" and source_class(env.source) is OneTaskSource


class OneTaskSource(TaskSource):
    """A user's source, named by dotted path (not registered by name)."""

    def load(self, split: str | None) -> list[Any]:
        from forge_cli.envs.task import Task
        from forge_cli.envs.verifiers import ShellVerifier

        return [Task(id="only", instruction="Do it.", verifier=ShellVerifier("true"))]


@pytest.mark.parametrize("env", ["harbor", "claweval", "qwenclawbench"])
def test_sources_that_cannot_run_say_why_with_exit_2(env: str) -> None:
    with pytest.raises(UserError) as raised:
        load_tasks(_env(f"env={env}"))
    assert raised.value.exit_code == 2 and raised.value.fix


def test_missing_env_path_is_exit_2(tmp_path: Path) -> None:
    for env in ("builtin", "harbor", "miniwob"):
        with pytest.raises(UserError) as raised:
            load_tasks(_env(f"env={env}", f"env.path={tmp_path / 'missing'}"))
        assert raised.value.exit_code == 2, env


# ---------------------------------------------------------------- conformance: every registered source
@pytest.mark.parametrize("name", known_sources())
def test_source_conformance(name: str, tmp_path: Path) -> None:
    """Every source: a known name, splits that load with unique ids and a verifier on every task, a default split
    that is one of its splits; or, when it cannot run unconfigured, exit 2 with a fix (never placeholder tasks)."""
    cls = SOURCES[name]
    assert cls.name == name and source_class(name) is cls
    overrides = [f"env.source={name}"]
    if name == "harbor":
        overrides.append(f"env.path={Path(__file__).parent / 'harbor_tasks'}")
    env = _env(*overrides)
    source = cls(env)
    try:
        splits = source.splits()
        for purpose in ("rollout", "eval", "train"):
            default = source.default_split(purpose)  # type: ignore[arg-type]
            assert default is None or default in splits
        for split in splits or [None]:
            tasks = source.load(split)
            assert tasks and len({t.id for t in tasks}) == len(tasks)
            for task in tasks:
                assert task.instruction
                assert isinstance(task.verifier, Verifier), f"{task.id} has no verifier"
                assert task.verify and task.verify not in task.instruction
    except UserError as error:
        assert error.exit_code == 2 and error.fix, f"{name}: a source that cannot run exits 2 with a fix"
