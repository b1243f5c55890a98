"""``env=harbor``: Harbor task directories (https://harborframework.com), run and scored as Harbor runs them.

A task is a directory (its name is the task id)::

    <task>/task.toml         [metadata], [agent] timeout_sec, [verifier] timeout_sec/env,
                             [environment] build_timeout_sec/docker_image/cpus/memory_mb/storage_mb, [solution] env
    <task>/instruction.md    what the harness is told (leading canary comment lines removed, as Harbor does)
    <task>/environment/      the Dockerfile (and its build context) of the task's image
    <task>/tests/test.sh     the verifier; writes /logs/verifier/reward.txt (a number) or reward.json (an object)
    <task>/solution/solve.sh the reference solution (never in the sandbox of a normal run)

``env.path`` is a directory of task directories, or one task directory; with ``env.options.split_dirs`` it holds
one directory of task directories per split (``train/``, ``test/``).

What forge does, following Harbor (``harbor.models.task.config``, ``harbor.verifier.verifier.Verifier.verify``,
``harbor.trial.trial.Trial``, ``harbor.agents.oracle.OracleAgent``):

- The image: ``[environment].docker_image`` when set (forge never pulls: it must be on the daemon), else
  ``environment/`` built once per content (``forge_cli/envs/harbor_image.py``), else ``env.image``.
- ``tests/`` is copied to ``/tests`` only after the harness exited and its processes were killed
  (``Task.hidden_files``). The verifier then empties ``/logs/verifier``, removes anything in ``/tests`` that is
  not one of the task's test files (so nothing the agent planted there survives), makes ``test.sh`` executable
  and runs ``(/tests/test.sh) > /logs/verifier/test-stdout.txt 2>&1`` in the image's ``WORKDIR`` with
  ``[verifier].env`` (``${VAR}`` and ``${VAR:-default}`` resolved from forge's environment). Its exit code is
  not the verdict: the reward file is.
- The reward: ``reward.json`` when present (its numeric fields; ``reward`` is the reward, the others are
  subscores; without a ``reward`` key, ``reward.txt`` supplies it, or a single numeric field is the reward),
  else ``reward.txt`` (one float). No reward file, an empty one or one that does not parse is a
  :class:`VerifierError`, as Harbor records an exception and no reward for it (never a reward of 0).
  ``passed`` is ``reward >= 1.0``. forge's rewards lie in [0, 1]; a reward outside is a VerifierError.
- Limits: ``[agent].timeout_sec`` is ``Task.timeout_s``, ``[verifier].timeout_sec`` (when set; else
  ``env.verifier_timeout_s``, 600 s as in Harbor) ``Task.verifier_timeout_s``; ``cpus``/``memory_mb`` are
  ``Task.metadata["resources"]`` (``{"cpus": float, "memory": "<n>m"}``, Harbor's defaults 1 CPU and 2048 MB
  when unset), ``build_timeout_sec`` bounds the image build. ``build`` records the image's ``WORKDIR`` as
  ``Task.metadata["workdir"]``: where Harbor runs the agent, ``solve.sh`` and ``test.sh``.

Not supported (Harbor features forge has no counterpart for): ``[agent].user``/``[verifier].user`` (commands
run as the image's user), multi-container tasks (``environment/docker-compose.yaml``: refused by ``build``),
``[environment].healthcheck``, network policies and GPUs (kept in ``metadata["environment"]``).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shlex
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from forge_cli.envs.harbor_image import ensure_image, has_image, image_tag, image_workdir
from forge_cli.envs.source import Log, Purpose, SetupError, TaskSource
from forge_cli.envs.task import Task
from forge_cli.envs.verifier import Score, Verifier, VerifierError, VerifyContext
from forge_cli.errors import UserError

if TYPE_CHECKING:
    from forge_cli.runtime.base import ExecResult, Sandbox

TESTS_DIR = "/tests"
SOLUTION_DIR = "/solution"
VERIFIER_DIR = "/logs/verifier"
AGENT_LOGS_DIR = "/logs/agent"
LOG_DIRS = (AGENT_LOGS_DIR, VERIFIER_DIR, "/logs/artifacts")
REWARD_TXT = f"{VERIFIER_DIR}/reward.txt"
REWARD_JSON = f"{VERIFIER_DIR}/reward.json"
TEST_STDOUT = f"{VERIFIER_DIR}/test-stdout.txt"
TAIL = 2000
TASK_LAYOUT = ("a Harbor task is a directory with task.toml, instruction.md, environment/Dockerfile, tests/test.sh "
               "(and solution/solve.sh)")
_TOML_AT = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")
_CANARY = re.compile(r"^(<!--.*canary.*-->|#.*canary.*)$", re.IGNORECASE)
_ENV_TEMPLATE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


# ---------------------------------------------------------------- task.toml
class _Section(BaseModel):
    # fields forge does not use are kept (task.toml files carry many), never an error
    model_config = ConfigDict(extra="allow")


class VerifierSection(_Section):
    timeout_sec: Annotated[float, Field(gt=0)] = 600.0
    env: dict[str, str] = {}
    user: str | int | None = None


class AgentSection(_Section):
    timeout_sec: Annotated[float, Field(gt=0)] | None = None
    user: str | int | None = None


class SolutionSection(_Section):
    env: dict[str, str] = {}


class EnvironmentSection(_Section):
    build_timeout_sec: Annotated[float, Field(gt=0)] = 600.0
    docker_image: str | None = None
    cpus: Annotated[int, Field(gt=0)] = 1
    memory_mb: Annotated[int, Field(gt=0)] = 2048
    storage_mb: Annotated[int, Field(gt=0)] = 10240
    gpus: Annotated[int, Field(ge=0)] = 0
    allow_internet: bool = True
    # deprecated in Harbor: sizes such as "4G" / "512M", mapped onto memory_mb / storage_mb
    memory: str | None = None
    storage: str | None = None

    @model_validator(mode="after")
    def _sizes(self) -> EnvironmentSection:
        if self.memory is not None:
            self.memory_mb = _size_mb(self.memory)
        if self.storage is not None:
            self.storage_mb = _size_mb(self.storage)
        return self


class PackageSection(_Section):
    name: str | None = None


class TaskToml(_Section):
    """The parts of Harbor's ``task.toml`` forge reads (``harbor.models.task.config.TaskConfig``)."""

    metadata: dict[str, Any] = {}
    task: PackageSection | None = None
    verifier: VerifierSection = VerifierSection()
    agent: AgentSection = AgentSection()
    environment: EnvironmentSection = EnvironmentSection()
    solution: SolutionSection = SolutionSection()


def _size_mb(text: str) -> int:
    """Harbor's deprecated size strings: "4G" -> 4096, "512M" -> 512, "2048K" -> 2."""
    value, unit = text.strip().upper()[:-1], text.strip().upper()[-1:]
    factors = {"G": 1024.0, "M": 1.0, "K": 1 / 1024}
    try:
        return int(float(value) * factors[unit])
    except (KeyError, ValueError):
        raise ValueError(f"'{text}' is not a size such as 4G or 512M") from None


def parse_task_toml(path: Path) -> TaskToml:
    """``path`` parsed and checked; UserError (exit 2) naming ``file:line:column`` or the bad field."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        at = _TOML_AT.search(message)
        where = f"{path}:{at.group(1)}:{at.group(2)}" if at else str(path)
        raise UserError(f"{where}: not valid TOML: {_TOML_AT.sub('', message)}", exit_code=2) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read it ({exc})", exit_code=2) from None
    try:
        return TaskToml.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise UserError(f"{path}: {problems}", exit_code=2) from None


# ---------------------------------------------------------------- tasks
def strip_canary(text: str) -> str:
    """The instruction without its leading canary comment lines and the blank lines after them (as Harbor)."""
    lines = text.split("\n")
    start = 0
    while start < len(lines) and _CANARY.match(lines[start].strip()):
        start += 1
    while start < len(lines) and not lines[start].strip():
        start += 1
    return "\n".join(lines[start:])


def read_tree(directory: Path) -> tuple[dict[str, bytes], list[str]]:
    """Every file under ``directory`` (relative POSIX path -> bytes) and the relative paths of executable ones."""
    files: dict[str, bytes] = {}
    executables: list[str] = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        rel = path.relative_to(directory).as_posix()
        files[rel] = path.read_bytes()
        if os.access(path, os.X_OK):
            executables.append(rel)
    return files, executables


def is_task_dir(path: Path) -> bool:
    """Whether ``path`` looks like a Harbor task (it has a task.toml or an instruction.md)."""
    return path.is_dir() and ((path / "task.toml").is_file() or (path / "instruction.md").is_file())


def _ceil(seconds: float | None) -> int | None:
    return None if seconds is None else math.ceil(seconds)


def load_task(task_dir: Path) -> Task:
    """One Harbor task directory as a Task; UserError (exit 2) when it is incomplete or its task.toml is bad."""
    missing = [name for name in ("task.toml", "instruction.md", "tests/test.sh") if not (task_dir / name).is_file()]
    if missing:
        raise UserError(f"{task_dir}: not a Harbor task: {', '.join(missing)} missing", fix=TASK_LAYOUT, exit_code=2)
    config = parse_task_toml(task_dir / "task.toml")
    try:
        instruction = strip_canary((task_dir / "instruction.md").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{task_dir / 'instruction.md'}: cannot read it ({exc})", exit_code=2) from None
    tests, executables = read_tree(task_dir / "tests")
    environment_dir = task_dir / "environment"
    env = config.environment
    if env.docker_image:
        image: str | None = env.docker_image
    elif (environment_dir / "Dockerfile").is_file():
        image = image_tag(task_dir.name, environment_dir)
    else:
        image = None
    solution_dir = task_dir / "solution"
    explicit = config.verifier.model_fields_set
    return Task(
        id=task_dir.name,
        instruction=instruction,
        verifier=HarborVerifier(tests=sorted(tests), executables=executables, env=config.verifier.env),
        hidden_files={f"{TESTS_DIR}/{rel}": data for rel, data in tests.items()},
        image=image,
        category=str(config.metadata.get("category") or ""),
        timeout_s=_ceil(config.agent.timeout_sec),
        verifier_timeout_s=_ceil(config.verifier.timeout_sec) if "timeout_sec" in explicit else None,
        metadata={
            "dir": str(task_dir),
            "name": config.task.name if config.task and config.task.name else task_dir.name,
            "harbor": json.loads(json.dumps(config.metadata, default=str)),
            "environment_dir": str(environment_dir) if environment_dir.is_dir() else None,
            "solution_dir": str(solution_dir) if solution_dir.is_dir() else None,
            "solution_env": dict(config.solution.env),
            "resources": {"cpus": float(env.cpus), "memory": f"{env.memory_mb}m"},
            "build_timeout_s": _ceil(env.build_timeout_sec),
            "environment": {"docker_image": env.docker_image, "storage_mb": env.storage_mb, "gpus": env.gpus,
                            "allow_internet": env.allow_internet, "agent_user": config.agent.user,
                            "verifier_user": config.verifier.user},
        },
    )


class HarborOptions(BaseModel):
    """``env.options`` of ``env=harbor``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # env.path holds one directory of task directories per split (train/, test/, ...); false: no splits
    split_dirs: bool = False


_DEFAULT_SPLIT: dict[str, str] = {"eval": "test", "rollout": "test", "train": "train"}


class HarborSource(TaskSource, name="harbor"):
    """Harbor task directories (see the module docstring for the layout and what forge does with it)."""

    Options = HarborOptions

    def _root(self) -> Path:
        if not self.env.path:
            raise UserError(f"env '{self.env.name}': no task directory configured",
                            fix="set env.path=/path/to/tasks (a directory of Harbor task directories, or one)",
                            exit_code=2)
        root = Path(self.env.path).expanduser()
        if not root.exists():
            raise UserError(f"env.path: {root} does not exist", fix="give the directory holding the Harbor tasks",
                            exit_code=2)
        if not root.is_dir():
            raise UserError(f"env.path: {root} is not a directory", fix=TASK_LAYOUT, exit_code=2)
        return root

    def _task_dirs(self, root: Path) -> list[Path]:
        if is_task_dir(root):
            return [root]
        found = sorted(p for p in root.iterdir() if not p.name.startswith(".") and is_task_dir(p))
        if not found:
            raise UserError(f"{root} holds no Harbor task directories", fix=TASK_LAYOUT, exit_code=2)
        return found

    def splits(self) -> list[str]:
        """With ``split_dirs``: the sub-directories of env.path that hold task directories; else none."""
        if not self.options.split_dirs:
            return []
        root = self._root()
        return sorted(p.name for p in root.iterdir()
                      if p.is_dir() and not p.name.startswith(".") and any(is_task_dir(c) for c in p.iterdir()))

    def default_split(self, purpose: Purpose) -> str | None:
        """With ``split_dirs``: ``test`` for eval and rollout, ``train`` for training, when that split exists."""
        wanted = _DEFAULT_SPLIT[purpose]
        return wanted if self.options.split_dirs and wanted in self.splits() else None

    def load(self, split: str | None) -> list[Task]:
        root = self._root()
        if self.options.split_dirs:
            known = self.splits()
            if split not in known:
                raise UserError(f"env.split: {'unknown split ' + repr(split) if split else 'no split chosen'} "
                                f"for env '{self.env.name}'", fix=f"splits: {', '.join(known) or 'none'}",
                                exit_code=2)
            root = root / split
        elif split is not None:
            raise UserError(f"env.split: unknown split '{split}' for env '{self.env.name}'",
                            fix="plain task directories have no splits: leave env.split unset "
                                "(or set env.options.split_dirs=true)", exit_code=2)
        return [load_task(task_dir) for task_dir in self._task_dirs(root)]

    def check_runtime(self, runtime_kind: str) -> None:
        if runtime_kind == "local":
            raise UserError(f"env '{self.env.name}': Harbor tasks run in their own image; the local runtime has none",
                            fix="use runtime=docker", exit_code=2)

    def build(self, tasks: list[Task], runtime_kind: str, log: Log) -> None:
        """Each task's image on the docker daemon: ``environment/`` built unless its content tag exists, a
        ``docker_image`` or ``env.image`` checked to be there. Records the image's ``WORKDIR`` (where Harbor runs
        the agent and test.sh) as ``task.metadata["workdir"]``. UserError: exit 2 on ``local`` (the tasks need
        their images), on ``kubernetes`` for tasks whose image forge would have to build, for a missing image and
        for multi-container tasks; exit 1 when a build fails."""
        self.check_runtime(runtime_kind)
        for task in tasks:
            env_dir = task.metadata.get("environment_dir")
            if env_dir and (Path(env_dir) / "docker-compose.yaml").is_file():
                raise UserError(f"{env_dir}/docker-compose.yaml: multi-container Harbor tasks are not supported",
                                fix=f"leave task {task.id} out (env.task_ids)", exit_code=2)
            if env_dir and task.image is None:
                raise UserError(f"{env_dir}: no Dockerfile (and no [environment].docker_image in task.toml)",
                                fix=TASK_LAYOUT, exit_code=2)
        to_build = [t for t in tasks if t.image and not t.metadata["environment"]["docker_image"]]
        if runtime_kind != "docker":
            if to_build:
                shown = ", ".join(f"{t.id} ({t.image})" for t in to_build[:10])
                raise UserError(f"env '{self.env.name}': {len(to_build)} task(s) need an image built from their "
                                f"environment/, which forge builds only on docker: {shown}",
                                fix="build them with runtime=docker, push them to a registry the cluster pulls "
                                    "from and name each in its task.toml as [environment].docker_image",
                                exit_code=2)
            return
        self._build_docker(tasks, to_build, log)

    def _build_docker(self, tasks: list[Task], to_build: list[Task], log: Log) -> None:
        from forge_cli.runtime.docker import DockerSandbox, client_for

        runtime = DockerSandbox.default_runtime()
        client = client_for(runtime)
        for task in to_build:
            assert task.image is not None
            ensure_image(runtime, task.image, Path(task.metadata["environment_dir"]),
                         task.metadata["build_timeout_s"], log)
        workdirs: dict[str, str | None] = {}
        for task in tasks:
            image = self.image(task)
            if image not in workdirs:
                if not has_image(client, image):
                    where = "[environment].docker_image of its task.toml" if task.image else "env.image"
                    raise UserError(f"task {task.id}: image '{image}' ({where}) is not on the docker daemon",
                                    fix="build or load it first (scripts/base-image.sh makes forge-base:bookworm); "
                                        "forge never pulls", exit_code=2)
                workdirs[image] = image_workdir(client, image)
            if workdirs[image]:
                task.metadata["workdir"] = workdirs[image]

    async def prepare(self, sandbox: Sandbox, task: Task) -> None:
        """Harbor's log directories (``/logs/agent``, ``/logs/verifier``, ``/logs/artifacts``, writable by all),
        then the task's setup commands (Harbor tasks have none)."""
        command = f"mkdir -p {' '.join(LOG_DIRS)} && chmod 777 {' '.join(LOG_DIRS)}"
        result = await sandbox.exec(["bash", "-c", command], timeout=self.env.setup_timeout_s)
        if not result.ok:
            raise SetupError(f"creating Harbor's /logs directories failed (exit {result.exit_code}): "
                             f"{result.stderr[-TAIL:]}")
        await super().prepare(sandbox, task)


# ---------------------------------------------------------------- running and scoring
def resolve_env(env: dict[str, str], where: str) -> dict[str, str]:
    """``env`` with ``${VAR}`` / ``${VAR:-default}`` replaced from forge's environment (as Harbor resolves
    ``[verifier].env`` and ``[solution].env``); VerifierError when a variable without a default is unset."""

    def value(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in os.environ:
            return os.environ[name]
        if default is not None:
            return default
        raise VerifierError(f"{where}: ${{{name}}} is not set in forge's environment")

    return {key: _ENV_TEMPLATE.sub(value, text) for key, text in env.items()}


def parse_rewards(reward_json: str | None, reward_txt: str | None) -> tuple[dict[str, float], str]:
    """Harbor's reading of /logs/verifier: the rewards and the file they came from. ``reward.json`` first (its
    numeric, non-boolean fields; ``reward`` from reward.txt when it has none), else ``reward.txt`` (one float).
    VerifierError for no file, an empty one, or one that does not parse."""
    if reward_json is not None:
        if not reward_json:
            raise VerifierError(f"{REWARD_JSON} is empty")
        try:
            parsed = json.loads(reward_json)
        except ValueError:
            raise VerifierError(f"{REWARD_JSON} is not JSON: {reward_json[:200]!r}") from None
        if not isinstance(parsed, dict):
            raise VerifierError(f"{REWARD_JSON} is not a JSON object: {reward_json[:200]!r}")
        rewards = {str(k): float(v) for k, v in parsed.items()
                   if isinstance(v, int | float) and not isinstance(v, bool)}
        if "reward" not in rewards and reward_txt:
            with contextlib.suppress(VerifierError):
                rewards["reward"] = parse_rewards(None, reward_txt)[0]["reward"]
        return rewards, REWARD_JSON
    if reward_txt is not None:
        if not reward_txt:
            raise VerifierError(f"{REWARD_TXT} is empty")
        try:
            return {"reward": float(reward_txt)}, REWARD_TXT
        except ValueError:
            raise VerifierError(f"{REWARD_TXT} holds {reward_txt[:80]!r}, not a number") from None
    raise VerifierError(f"/tests/test.sh wrote no reward ({REWARD_TXT} or {REWARD_JSON})")


class HarborVerifier(Verifier, kind="harbor"):
    """Runs a Harbor task's ``/tests/test.sh`` and reads its reward file (see the module docstring).

    ``tests``: the relative paths of the task's test files (the runner wrote them to ``/tests`` as hidden files);
    anything else in ``/tests`` is removed first (None: nothing is removed). ``executables``: those to make
    executable again (files are written without modes). ``env``: ``[verifier].env`` of task.toml.
    """

    def __init__(self, tests: list[str] | None = None, executables: list[str] | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.tests = None if tests is None else list(tests)
        self.executables = list(executables or [])
        self.env = dict(env or {})

    def describe(self) -> str:
        return f"harbor: {TESTS_DIR}/test.sh, reward from {REWARD_JSON} or {REWARD_TXT}"

    def _prepare_command(self) -> str:
        """Empty /logs/verifier, drop what the agent left in /tests, make the test scripts executable."""
        lines = ["set -e", f"rm -rf {VERIFIER_DIR}", f"mkdir -p {VERIFIER_DIR}", f"chmod 777 {VERIFIER_DIR}"]
        if self.tests is not None:
            keep = "|".join(shlex.quote(f"{TESTS_DIR}/{rel}") for rel in self.tests) or "''"
            lines += [f"find -H {TESTS_DIR} -mindepth 1 ! -type d -print0 | while IFS= read -r -d '' f; do "
                      f'case "$f" in {keep}) ;; *) rm -f -- "$f" ;; esac; done',
                      f"find -H {TESTS_DIR} -mindepth 1 -type d -empty -delete"]
        scripts = sorted({"test.sh", *self.executables})
        lines.append("chmod +x " + " ".join(shlex.quote(f"{TESTS_DIR}/{rel}") for rel in scripts))
        return "\n".join(lines)

    async def score(self, ctx: VerifyContext) -> Score:
        prepared = await ctx.run(self._prepare_command())
        if not prepared.ok:
            raise VerifierError(f"preparing /tests and {VERIFIER_DIR} failed (exit {prepared.exit_code}): "
                                f"{prepared.stderr[-300:]}")
        env = resolve_env(self.env, "[verifier].env")
        test = await ctx.run(f"({TESTS_DIR}/test.sh) > {TEST_STDOUT} 2>&1", env=env,
                             cwd=ctx.task.metadata.get("workdir"))
        output = (await ctx.read_text(TEST_STDOUT) or "")[-TAIL:]
        ctx.log(f"test.sh exit {test.exit_code} timed_out={test.timed_out}\n--- {TEST_STDOUT}\n{output}")
        if test.timed_out:
            raise VerifierError(f"{TESTS_DIR}/test.sh timed out after {ctx.timeout_s}s")
        rewards, source = parse_rewards(await ctx.read_text(REWARD_JSON), await ctx.read_text(REWARD_TXT))
        if "reward" in rewards:
            reward = rewards.pop("reward")
        elif len(rewards) == 1:
            (reward,) = rewards.values()
            rewards = {}
        else:
            raise VerifierError(f"{source} has no numeric 'reward' field (fields: {', '.join(rewards) or 'none'})")
        return Score(reward=reward, passed=reward >= 1.0, subscores=rewards,
                     details={"reward_file": source, "exit_code": test.exit_code, "output": output})


async def run_solution(sandbox: Sandbox, task: Task, timeout: float | None = None) -> ExecResult:
    """Harbor's oracle agent: the task's ``solution/`` copied to ``/solution`` and ``solve.sh`` run in the image's
    WORKDIR with ``DEBIAN_FRONTEND=noninteractive`` and ``[solution].env``, its output in
    ``/logs/agent/oracle.txt``. For checking that a task is solvable; never part of a normal run."""
    solution_dir = task.metadata.get("solution_dir")
    if not solution_dir or not (Path(solution_dir) / "solve.sh").is_file():
        raise UserError(f"task {task.id}: no solution/solve.sh", exit_code=2)
    files, executables = read_tree(Path(solution_dir))
    for rel, data in files.items():
        await sandbox.write_file(f"{SOLUTION_DIR}/{rel}", data)
    scripts = " ".join(shlex.quote(f"{SOLUTION_DIR}/{rel}") for rel in sorted({"solve.sh", *executables}))
    command = (f"mkdir -p {AGENT_LOGS_DIR} && chmod +x {scripts} && "
               f"{SOLUTION_DIR}/solve.sh > {AGENT_LOGS_DIR}/oracle.txt 2>&1")
    env = {"DEBIAN_FRONTEND": "noninteractive", **resolve_env(task.metadata.get("solution_env") or {},
                                                               "[solution].env")}
    return await sandbox.exec(["bash", "-c", command], env=env, timeout=timeout,
                              cwd=task.metadata.get("workdir"))
