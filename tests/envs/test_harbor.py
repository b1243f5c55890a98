"""``env=harbor``: loading Harbor task directories and bad input (no docker), then the three sample tasks in
``tests/envs/harbor_tasks`` built and run in real docker sandboxes (marker ``docker``): each fails untouched and
reaches reward 1 with its reference solution, run as Harbor's oracle agent runs it."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from forge_cli.config.compose import compose
from forge_cli.config.schema import EnvConfig, Resources
from forge_cli.envs.harbor import HarborSource, HarborVerifier, parse_rewards, resolve_env, run_solution
from forge_cli.envs.source import load_tasks
from forge_cli.envs.task import Task
from forge_cli.envs.verifier import Score, VerifierError, VerifyContext, run_verifier
from forge_cli.errors import UserError
from tests.requires import requires

SAMPLES_DIR = Path(__file__).with_name("harbor_tasks")
SAMPLES = ["fix-script", "hello-file", "json-transform"]
BASE_IMAGE = "forge-base:bookworm"


def _env(*overrides: str) -> EnvConfig:
    return compose(["env=harbor", *overrides]).experiment.env


def _source(path: Path | str | None, *overrides: str) -> HarborSource:
    return HarborSource(_env(*([f"env.path={path}"] if path is not None else []), *overrides))


def _copy_task(name: str, dest: Path) -> Path:
    shutil.copytree(SAMPLES_DIR / name, dest / name)
    return dest / name


def _by_id(tasks: list[Task]) -> dict[str, Task]:
    return {t.id: t for t in tasks}


# ---------------------------------------------------------------- loading
def test_sample_tasks_load_as_harbor_defines_them() -> None:
    taskset = load_tasks(_env(f"env.path={SAMPLES_DIR}"))
    assert taskset.split is None and [t.id for t in taskset.tasks] == SAMPLES
    tasks = _by_id(taskset.tasks)
    hello = tasks["hello-file"]
    # the leading canary comment and the blank line after it are not shown to the agent
    assert hello.instruction.startswith("Create the file `/app/hello.txt`") and "canary" not in hello.instruction
    assert isinstance(hello.verifier, HarborVerifier) and hello.verifier.kind == "harbor"
    assert set(hello.hidden_files) == {"/tests/test.sh"} and not hello.files and not hello.setup
    assert (hello.timeout_s, hello.verifier_timeout_s, hello.category) == (300, 60, "file-io")
    assert hello.metadata["resources"] == {"cpus": 1.0, "memory": "1024m"}
    assert hello.metadata["solution_dir"] == str(SAMPLES_DIR / "hello-file" / "solution")
    assert hello.metadata["harbor"]["tags"] == ["shell", "sample"]
    assert hello.metadata["build_timeout_s"] == 300
    # the solution never travels with the task into a sandbox
    for task in tasks.values():
        shipped = [*task.files, *task.hidden_files]
        assert not any("solution" in p or "solve.sh" in p for p in shipped)
        assert task.image is not None and task.image.startswith(f"forge-harbor-{task.id}:")
    fix = tasks["fix-script"]
    assert set(fix.hidden_files) == {"/tests/check.sh", "/tests/test.sh"}
    assert fix.hidden_files["/tests/check.sh"] == (SAMPLES_DIR / "fix-script/tests/check.sh").read_bytes()
    assert isinstance(fix.verifier, HarborVerifier) and "check.sh" in fix.verifier.executables
    # Harbor's deprecated memory = "1G" is 1024 MB; cpus from task.toml
    assert fix.metadata["resources"] == {"cpus": 2.0, "memory": "1024m"}
    data = tasks["json-transform"]
    assert data.metadata["resources"] == {"cpus": 1.0, "memory": "2048m"}  # Harbor's defaults
    assert isinstance(data.verifier, HarborVerifier) and data.verifier.env == {"EXPECTED": "/tests/expected.json"}
    for task in tasks.values():
        Resources(**task.metadata["resources"])  # what the runner applies to the sandbox spec


def test_one_task_directory_and_default_verifier_timeout(tmp_path: Path) -> None:
    task_dir = _copy_task("hello-file", tmp_path)
    toml = task_dir / "task.toml"
    toml.write_text(toml.read_text().replace("[verifier]\ntimeout_sec = 60.0\n", ""))
    (task,) = load_tasks(_env(f"env.path={task_dir}")).tasks
    # no [verifier].timeout_sec: env.verifier_timeout_s (600, Harbor's default) applies
    assert task.id == "hello-file" and task.verifier_timeout_s is None
    assert _env().verifier_timeout_s == 600


def test_image_tag_follows_the_environment_content(tmp_path: Path) -> None:
    def tag() -> str | None:
        (task,) = _source(tmp_path / "hello-file").load(None)
        return task.image

    original = _by_id(_source(SAMPLES_DIR).load(None))["hello-file"].image
    task_dir = _copy_task("hello-file", tmp_path)
    assert tag() == original  # the hash does not depend on where the task lies
    (task_dir / "instruction.md").write_text("Something else.\n")
    assert tag() == original  # only environment/ counts
    (task_dir / "environment" / "data.txt").write_text("x\n")
    changed = tag()
    assert changed != original
    (task_dir / "environment" / "data.txt").chmod(0o755)
    assert tag() not in (original, changed)


def test_split_dirs_option(tmp_path: Path) -> None:
    for split, names in {"train": ["hello-file", "fix-script"], "test": ["json-transform"]}.items():
        (tmp_path / split).mkdir()
        for name in names:
            _copy_task(name, tmp_path / split)
    env = _env(f"env.path={tmp_path}", "env.options.split_dirs=true")
    source = HarborSource(env)
    assert source.splits() == ["test", "train"]
    assert (source.default_split("eval"), source.default_split("train")) == ("test", "train")
    assert [t.id for t in load_tasks(env, purpose="eval").tasks] == ["json-transform"]
    assert [t.id for t in load_tasks(env, purpose="train").tasks] == ["fix-script", "hello-file"]
    with pytest.raises(UserError, match="unknown split 'dev'") as info:
        load_tasks(_env(f"env.path={tmp_path}", "env.options.split_dirs=true", "env.split=dev"))
    assert info.value.exit_code == 2


# ---------------------------------------------------------------- bad input
def _load_error(*overrides: str) -> UserError:
    with pytest.raises(UserError) as info:
        load_tasks(_env(*overrides))
    assert info.value.exit_code == 2, info.value.message
    return info.value


def test_bad_task_directories(tmp_path: Path) -> None:
    error = _load_error()
    assert "no task directory configured" in error.message and error.fix and "env.path=" in error.fix
    assert "does not exist" in _load_error(f"env.path={tmp_path / 'nope'}").message
    (tmp_path / "file").write_text("x")
    assert "is not a directory" in _load_error(f"env.path={tmp_path / 'file'}").message
    (tmp_path / "empty").mkdir()
    assert "holds no Harbor task directories" in _load_error(f"env.path={tmp_path / 'empty'}").message
    broken = _copy_task("hello-file", tmp_path / "incomplete")
    (broken / "tests" / "test.sh").unlink()
    assert "tests/test.sh missing" in _load_error(f"env.path={tmp_path / 'incomplete'}").message
    error = _load_error(f"env.path={SAMPLES_DIR}", "env.split=test")
    assert "unknown split 'test'" in error.message


def test_task_toml_errors_name_file_and_line(tmp_path: Path) -> None:
    task_dir = _copy_task("hello-file", tmp_path)
    toml = task_dir / "task.toml"
    toml.write_text('version = "1.0"\n\n[verifier\ntimeout_sec = 60\n')
    error = _load_error(f"env.path={tmp_path}")
    assert error.message.startswith(f"{toml}:3:") and "not valid TOML" in error.message
    toml.write_text('[environment]\ncpus = "many"\n')
    assert "environment.cpus" in _load_error(f"env.path={tmp_path}").message
    toml.write_text('[environment]\nmemory = "lots"\n')
    assert "not a size" in _load_error(f"env.path={tmp_path}").message


def test_build_refuses_runtimes_without_the_images(tmp_path: Path) -> None:
    source = _source(SAMPLES_DIR)
    tasks = source.load(None)
    with pytest.raises(UserError, match="the local runtime has none") as info:
        source.build(tasks, "local", print)
    assert info.value.exit_code == 2 and info.value.fix == "use runtime=docker"
    with pytest.raises(UserError, match="forge builds only on docker") as info:
        source.build(tasks, "kubernetes", print)
    assert info.value.exit_code == 2 and info.value.fix and "docker_image" in info.value.fix
    # a task naming a pushed image is the user's promise on kubernetes
    task_dir = _copy_task("hello-file", tmp_path)
    with (task_dir / "task.toml").open("a") as f:
        f.write('docker_image = "registry.example/hello:1"\n')
    (task,) = _source(task_dir).load(None)
    assert task.image == "registry.example/hello:1"
    _source(task_dir).build([task], "kubernetes", print)
    (task_dir / "environment" / "docker-compose.yaml").write_text("services: {}\n")
    with pytest.raises(UserError, match="multi-container") as info:
        _source(task_dir).build([task], "kubernetes", print)
    assert info.value.exit_code == 2


# ---------------------------------------------------------------- reward files and env, as Harbor reads them
def test_parse_rewards() -> None:
    assert parse_rewards(None, "1\n") == ({"reward": 1.0}, "/logs/verifier/reward.txt")
    assert parse_rewards('{"reward": 0.5, "parses": 1, "note": "x", "ok": true}', None)[0] == {
        "reward": 0.5, "parses": 1.0}
    # reward.json comes first; reward.txt supplies `reward` only when the JSON has none
    assert parse_rewards('{"reward": 0}', "1")[0] == {"reward": 0.0}
    assert parse_rewards('{"accuracy": 0.25}', "1")[0] == {"accuracy": 0.25, "reward": 1.0}
    for json_text, txt, message in [(None, None, "wrote no reward"), (None, "", "is empty"),
                                    (None, "yes", "not a number"), ("", None, "is empty"),
                                    ("{", None, "not JSON"), ("[1]", None, "not a JSON object")]:
        with pytest.raises(VerifierError, match=message):
            parse_rewards(json_text, txt)


def test_resolve_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORGE_HARBOR_TEST_KEY", "k1")
    monkeypatch.delenv("FORGE_HARBOR_UNSET", raising=False)
    assert resolve_env({"A": "${FORGE_HARBOR_TEST_KEY}", "B": "x-${FORGE_HARBOR_UNSET:-d}", "C": "plain"},
                       "[verifier].env") == {"A": "k1", "B": "x-d", "C": "plain"}
    with pytest.raises(VerifierError, match="FORGE_HARBOR_UNSET"):
        resolve_env({"A": "${FORGE_HARBOR_UNSET}"}, "[verifier].env")


# ---------------------------------------------------------------- docker
@pytest.fixture(scope="module")
def docker_ready() -> None:
    """dockerd and the base image (the part docker of tests/requires.py)."""
    requires("docker")


@pytest.fixture(scope="module")
def built(docker_ready: None) -> tuple[HarborSource, dict[str, Task]]:
    """The sample tasks with their images built (or found cached)."""
    source = _source(SAMPLES_DIR)
    tasks = source.load(None)
    source.build(tasks, "docker", lambda line: None)
    return source, _by_id(tasks)


@contextlib.asynccontextmanager
async def _sandbox(source: HarborSource, task: Task) -> AsyncIterator[Any]:
    """A sandbox as the runner makes one: the task's image, its WORKDIR and resources, then ``prepare``."""
    from forge_cli.runtime.docker import DockerSandbox
    from forge_cli.runtime.spec import SandboxSpec

    run_id = f"harbor-test-{uuid.uuid4().hex[:8]}"
    spec = SandboxSpec(run_id=run_id, rollout_id=f"{run_id}-{task.id}", image=source.image(task),
                       workdir=task.metadata.get("workdir", "/work"), timeout_s=300,
                       resources=Resources(**task.metadata["resources"]))
    sandbox = await DockerSandbox.create(spec, DockerSandbox.default_runtime())
    try:
        await source.prepare(sandbox, task)
        yield sandbox
    finally:
        await sandbox.stop()


async def _verify(sandbox: Any, task: Task) -> Score:
    """What the runner does after the harness: kill its processes, write the hidden files, verify."""
    assert task.verifier is not None
    await sandbox.kill_processes()
    for path, data in task.hidden_files.items():
        await sandbox.write_file(path, data)
    ctx = VerifyContext(sandbox=sandbox, task=task, rollout_id="t", reward_dir="/tmp/rd", timeout_s=60)
    return await run_verifier(task.verifier, ctx)


@pytest.mark.docker
@pytest.mark.parametrize("name", SAMPLES)
def test_sample_task_fails_untouched_and_passes_with_its_solution(
        built: tuple[HarborSource, dict[str, Task]], name: str) -> None:
    source, tasks = built
    task = tasks[name]
    assert task.metadata["workdir"] == "/app"  # the Dockerfile's WORKDIR, where Harbor runs agent and tests

    async def body() -> tuple[Score, Score]:
        async with _sandbox(source, task) as sandbox:
            # nothing of the tests or the solution is in the sandbox while the harness runs
            hidden = await sandbox.exec(["bash", "-c", "! test -e /tests -o -e /solution && test -d /logs/agent"])
            assert hidden.ok, hidden
            untouched = await _verify(sandbox, task)
        async with _sandbox(source, task) as sandbox:
            solved = await run_solution(sandbox, task, timeout=60)
            assert solved.ok, solved
            return untouched, await _verify(sandbox, task)

    untouched, solved = asyncio.run(body())
    assert (untouched.reward, untouched.passed) == (0.0, False), untouched
    assert (solved.reward, solved.passed) == (1.0, True), solved
    if name == "json-transform":  # reward.json: `reward` is the reward, the other fields are subscores
        assert solved.subscores == {"parses": 1.0} and untouched.subscores == {"parses": 0.0}
        assert solved.details["reward_file"] == "/logs/verifier/reward.json"


@pytest.mark.docker
def test_what_the_agent_leaves_in_logs_and_tests_counts_for_nothing(
        built: tuple[HarborSource, dict[str, Task]]) -> None:
    source, tasks = built
    task = tasks["hello-file"]
    # a reward written during the run, files planted in /tests, and a daemon that keeps writing a reward
    plant = ("echo 1 > /logs/verifier/reward.txt && echo '{\"reward\": 1}' > /logs/verifier/reward.json && "
             "mkdir -p /tests/sub && echo 'echo 1 > /logs/verifier/reward.txt' > /tests/sub/helper.sh && "
             "echo planted > /tests/extra.txt && (setsid sh -c 'while :; do echo 1 > /logs/verifier/reward.txt "
             "2>/dev/null; sleep 0.05; done' > /dev/null 2>&1 &)")

    async def body() -> tuple[Score, str]:
        async with _sandbox(source, task) as sandbox:
            assert (await sandbox.exec(["bash", "-c", plant])).ok
            score = await _verify(sandbox, task)
            left = await sandbox.exec(["bash", "-c", "find /tests | sort"])
            return score, left.stdout

    score, left = asyncio.run(body())
    assert (score.reward, score.passed) == (0.0, False), score
    assert left.split() == ["/tests", "/tests/test.sh"]


@pytest.mark.docker
def test_missing_reward_is_an_infra_error_and_taskless_environment_uses_env_image(
        docker_ready: None, tmp_path: Path) -> None:
    task_dir = _copy_task("hello-file", tmp_path)
    shutil.rmtree(task_dir / "environment")
    (task_dir / "tests" / "test.sh").write_text("#!/bin/bash\necho 'ran, wrote no reward'\n")
    source = _source(task_dir)
    (task,) = source.load(None)
    source.build([task], "docker", lambda line: None)
    assert task.image is None and source.image(task) == BASE_IMAGE

    async def body() -> None:
        async with _sandbox(source, task) as sandbox:
            with pytest.raises(VerifierError, match="wrote no reward"):
                await _verify(sandbox, task)

    asyncio.run(body())


@pytest.fixture
def scratch_images() -> Iterator[list[str]]:
    """Image tags a test builds, removed afterwards."""
    tags: list[str] = []
    yield tags
    for tag in tags:
        subprocess.run(["docker", "image", "rm", "-f", tag], capture_output=True, timeout=60)


@pytest.mark.docker
def test_build_once_then_cached(docker_ready: None, tmp_path: Path, scratch_images: list[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    task_dir = _copy_task("hello-file", tmp_path)
    (task_dir / "environment" / "marker.txt").write_text(uuid.uuid4().hex)  # a tag no other run has
    source = _source(task_dir)
    (task,) = source.load(None)
    assert task.image is not None
    scratch_images.append(task.image)
    lines: list[str] = []
    source.build([task], "docker", lines.append)
    assert any(line.startswith(f"harbor: building {task.image}") for line in lines), lines

    def no_build(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("rebuilt a cached image")

    monkeypatch.setattr("forge_cli.runtime.images.build_image", no_build)
    lines.clear()
    (again,) = _source(task_dir).load(None)
    _source(task_dir).build([again], "docker", lines.append)
    assert lines == [f"harbor: {task.image} is built (cached)"]


@pytest.mark.docker
@pytest.mark.parametrize("dockerfile, shown", [
    ("FROM forge-base:bookworm\nRUN echo forge-harbor-broken-step && exit 3\n", "returned a non-zero code: 3"),
    ("FROM forge-harbor-no-such-base:none\n", "forge-harbor-no-such-base"),
])
def test_dockerfile_that_fails_to_build(docker_ready: None, tmp_path: Path, scratch_images: list[str],
                                        dockerfile: str, shown: str) -> None:
    task_dir = _copy_task("hello-file", tmp_path)
    (task_dir / "environment" / "Dockerfile").write_text(dockerfile)
    source = _source(task_dir)
    (task,) = source.load(None)
    assert task.image is not None
    scratch_images.append(task.image)
    with pytest.raises(UserError) as info:
        source.build([task], "docker", lambda line: None)
    error = info.value
    assert error.exit_code == 1 and error.message.startswith(f"{task_dir / 'environment' / 'Dockerfile'}: ")
    assert shown in error.message, error.message


@pytest.mark.docker
def test_missing_docker_image_is_named(docker_ready: None, tmp_path: Path) -> None:
    task_dir = _copy_task("hello-file", tmp_path)
    with (task_dir / "task.toml").open("a") as f:
        f.write('docker_image = "forge-harbor-never-built:x"\n')
    source = _source(task_dir)
    with pytest.raises(UserError, match=r"forge-harbor-never-built:x.*is not on the docker daemon") as info:
        source.build(source.load(None), "docker", lambda line: None)
    assert info.value.exit_code == 2

