"""The builtin suite: sizes and splits, determinism, hidden answers, every task's reference solution scoring
exactly 1.0 and doing nothing exactly 0.0 in a real local sandbox, partial credit, and flat task files."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from forge_cli.config.compose import compose
from forge_cli.config.schema import DockerRuntime, EnvConfig
from forge_cli.envs.builtin import FAMILIES, BuiltinOptions, BuiltinSource, generate, read_task_file, templates
from forge_cli.envs.builtin.taskfile import dump_tasks, task_entry
from forge_cli.envs.resolve import check_options, compose_resolved
from forge_cli.envs.source import load_tasks
from forge_cli.envs.task import Task
from forge_cli.envs.verifier import Score, VerifyContext, new_reward_dir, run_verifier
from forge_cli.envs.verifiers import PythonVerifier, ShellVerifier
from forge_cli.errors import ConfigError, UserError
from forge_cli.runtime import isolation
from forge_cli.runtime.base import Sandbox
from forge_cli.runtime.docker import DockerSandbox
from forge_cli.runtime.local import LocalSandbox
from forge_cli.runtime.spec import SandboxSpec
from tests.requires import requires

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "forge_cli" / "envs" / "examples" / "tasks.yaml"
HOME = "/tmp/forge-home"
BATCH = 24


def _env(*overrides: str) -> EnvConfig:
    return compose(list(overrides)).experiment.env


def _source(*overrides: str, **options: Any) -> BuiltinSource:
    env = _env(*overrides)
    if options:
        check_options(env.source, options)  # what every command's composition checks (ValueError)
    return BuiltinSource(EnvConfig.model_validate({**env.model_dump(), "options": options}) if options else env)


def _all() -> list[Task]:
    return _source().load("all")


def _content(task: Task) -> tuple[object, ...]:
    return (task.instruction, tuple(sorted(task.files.items())), tuple(task.setup))


# ---------------------------------------------------------------- the generated suite
SPLIT_NAMES = ("train", "val", "test")


def _key(task: Task) -> str:
    return f"{task.category}-{task.metadata['template']}"


def _norm(text: str) -> str:
    return " ".join(text.split())


def test_default_splits_sizes_and_families() -> None:
    source = _source()
    train, val, test = (source.load(split) for split in SPLIT_NAMES)
    assert (len(train), len(val), len(test)) == (96, 44, 56)
    assert source.splits() == ["train", "val", "test", "all"]
    assert [source.default_split(p) for p in ("eval", "train", "rollout", "validate")] == ["test", "train", "test",
                                                                                          "val"]
    assert FAMILIES == ("create-edit", "search-count", "json-csv", "fix-script", "multi-step", "answer")
    assert Counter(t.category for t in train) == {"create-edit": 15, "search-count": 18, "json-csv": 12,
                                                  "fix-script": 18, "multi-step": 18, "answer": 15}
    assert Counter(t.category for t in test) == {"create-edit": 9, "search-count": 10, "json-csv": 8,
                                                 "fix-script": 10, "multi-step": 10, "answer": 9}
    assert [t.id for t in source.load("all")] == [t.id for t in train + val + test]
    assert [t.id for t in source.load(None)] == [t.id for t in train + val + test]
    assert (train[0].id, val[0].id, test[0].id) == ("create-edit-write-file-0", "create-edit-write-file-1",
                                                    "create-edit-write-file-2")


def test_ids_templates_and_metadata() -> None:
    tasks = _all()
    assert len({t.id for t in tasks}) == len(tasks) == 196
    assert len(templates()) == 68 and {t.difficulty for t in templates()} == {"easy", "medium", "hard"}
    for family in FAMILIES:
        own = [t for t in templates() if t.family == family]
        assert len(own) >= 4 and {t.difficulty for t in own} >= {"easy"}, family
    for task in tasks:
        meta = task.metadata
        assert task.id == f"{meta['family']}-{meta['template']}-{meta['seed']}" and task.category == meta["family"]
        assert isinstance(task.verifier, PythonVerifier) and task.verify is not None
        assert task.verify.startswith("python: forge_cli.envs.builtin.")
        assert meta["solution"] and task.instruction
        assert task.template == _key(task) and task.guided is not None
        assert task.seen == (meta["held_out"] is None)


def test_generation_is_deterministic_and_seeded() -> None:
    def dump(tasks: list[Task]) -> list[Any]:
        return [(t.id, _content(t), t.verifier.args if isinstance(t.verifier, PythonVerifier) else None,
                 t.metadata["solution"]) for t in tasks]

    assert dump(_all()) == dump(_all())
    other = generate(BuiltinOptions(seed=1000))
    assert {t.id for t in other["test"]}.isdisjoint({t.id for t in _source().load("all")})
    assert other["test"][0].id == "create-edit-write-file-1002"
    more = generate(BuiltinOptions(train_per_template=5, val_per_template=2, test_per_template=2))
    assert (len(more["train"]), len(more["val"]), len(more["test"])) == (160, 88, 112)
    assert [t.id for t in more["train"][:3]] == ["create-edit-write-file-0", "create-edit-write-file-3",
                                                 "create-edit-write-file-6"]


@pytest.mark.parametrize("options", [BuiltinOptions(), BuiltinOptions(seed=1000), BuiltinOptions(seed=2000),
                                     BuiltinOptions(train_per_template=6, val_per_template=2, test_per_template=2,
                                                    seed=7)])
def test_held_out_design(options: BuiltinOptions) -> None:
    """The issue-31 design: no instruction in two splits, unseen templates have no train instance, val's and
    test's unseen templates are disjoint, at least 20 unseen test templates across all families (guided and not),
    every template drawn as often as asked."""
    tasks = generate(options)
    instructions = {split: [_norm(t.instruction) for t in tasks[split]] for split in SPLIT_NAMES}
    for a, b in (("train", "val"), ("train", "test"), ("val", "test")):
        shared = set(instructions[a]) & set(instructions[b])
        assert not shared, f"{a} and {b} share instructions: {sorted(shared)[:3]}"
    for split in SPLIT_NAMES:  # nor twice within one split
        assert len(set(instructions[split])) == len(instructions[split]), split
    unseen = {split: {t.key for t in templates() if t.held_out == split} for split in ("val", "test")}
    trained = {_key(t) for t in tasks["train"]}
    assert trained == {t.key for t in templates() if t.held_out is None}
    assert trained.isdisjoint(unseen["val"] | unseen["test"]) and unseen["val"].isdisjoint(unseen["test"])
    for split in ("val", "test"):
        keys = {_key(t) for t in tasks[split]}
        assert keys == trained | unseen[split], split
        assert all(t.seen is (_key(t) in trained) for t in tasks[split])
    test_unseen = [t for t in templates() if t.held_out == "test"]
    assert len(test_unseen) >= 20 and {t.family for t in test_unseen} == set(FAMILIES)
    assert sum(not t.guided for t in test_unseen) >= 18 and any(t.guided for t in test_unseen)
    assert {t.family for t in templates() if t.held_out == "val"} == set(FAMILIES)
    counts = Counter((split, _key(t)) for split in SPLIT_NAMES for t in tasks[split])
    for t in templates():
        for split in SPLIT_NAMES:
            want = options.per_template(split) if t.held_out in (None, split) and not (
                split == "train" and t.held_out) else 0
            assert counts[(split, t.key)] == want, (t.key, split)
    offsets = {"train": 0, "val": 1, "test": 2}
    for split in SPLIT_NAMES:
        assert all(t.metadata["seed"] % 3 == (options.seed + offsets[split]) % 3 for t in tasks[split])


def test_guided_means_the_instruction_shows_the_solution() -> None:
    """A guided template's reference solution stands in its instruction word for word; no other template's does."""
    for task in _all():
        shown = task.metadata["solution"] in task.instruction
        assert shown == task.guided, (task.id, task.guided)


def _values(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [v for item in value.values() for v in _values(item)]
    if isinstance(value, list):
        return [v for item in value for v in _values(item)]
    return [str(value)] if value is not None else []


def test_answers_stay_hidden() -> None:
    for task in _all():
        assert isinstance(task.verifier, PythonVerifier)
        for secret in task.metadata["secrets"]:
            assert not re.search(rf"(?<![\w-]){re.escape(secret)}(?![\w-])", task.instruction), (task.id, secret)
        args = task.verifier.args
        if "path" in args:  # the output the harness must write does not exist before it runs
            assert args["path"] not in task.files or task.verifier.name.endswith(":edit"), task.id
        for expected in _values(args.get("expected")) if "path" in args and "original" not in args else []:
            assert all(expected.strip() != str(content).strip() for content in task.files.values()), task.id


def test_options_are_validated() -> None:
    assert _source(seed=3, test_per_template=2).load("test")[0].id == "create-edit-write-file-5"
    with pytest.raises(ValueError, match=r"env\.options for source 'builtin': tests_per_template: Extra inputs"):
        _source(tests_per_template=2)
    with pytest.raises(UserError, match="unknown split 'dev'"):
        load_tasks(_env("env.split=dev"))
    taskset = load_tasks(_env(), purpose="train")
    assert (taskset.split, len(taskset.tasks)) == ("train", 96)
    assert load_tasks(_env(), purpose="validate").split == "val"


def test_options_on_the_command_line_and_no_leak_to_other_sources() -> None:
    """``env.options.seed=N`` (the learning benchmark's repeats) composes although the YAML leaves options empty; a
    misspelt option is the source's own error; another source does not inherit the builtin suite's options."""
    other = compose_resolved(["env.options.seed=1000"]).experiment.env
    assert other.options == {"seed": 1000}
    assert load_tasks(other).tasks[0].id != load_tasks(_env()).tasks[0].id
    with pytest.raises(ConfigError, match=r"seeed: Extra inputs"):
        compose_resolved(["env.options.seeed=1"])
    assert compose_resolved(["env.source=miniwob"]).experiment.env.options == {}


# ---------------------------------------------------------------- every task in a real sandbox
async def _run(source: BuiltinSource, task: Task, script: str | None, run_id: str,
               runtime: DockerRuntime | None = None) -> Score:
    """``task`` in a fresh sandbox: a local one (None), or docker's with ``runtime``."""
    spec = SandboxSpec(run_id=run_id, rollout_id=task.id, image="forge-base:bookworm", workdir="/work",
                       env={"HOME": HOME}, files=dict(task.files))
    box: Sandbox
    if runtime is None:
        box = await LocalSandbox.create(spec, None)
        # isolated (bubblewrap) wherever it can be: the reference solutions must score under isolation
        assert box.isolated or not isolation.probe().usable
    else:
        box = await DockerSandbox.create(spec, runtime)
    try:
        await source.prepare(box, task)
        if script is not None:
            result = await box.exec(["bash", "-c", script], timeout=30)
            assert result.ok, (task.id, result.stderr)
        await box.kill_processes()
        reward_dir = new_reward_dir(HOME)
        assert (await box.exec(["mkdir", "-p", reward_dir])).ok
        ctx = VerifyContext(sandbox=box, task=task, rollout_id="t", reward_dir=reward_dir, timeout_s=30)
        assert task.verifier is not None
        return await run_verifier(task.verifier, ctx)
    finally:
        await box.stop()


async def _scores(source: BuiltinSource, jobs: list[tuple[Task, str | None]],
                  runtime: DockerRuntime | None = None) -> list[Score]:
    scores: list[Score] = []
    for start in range(0, len(jobs), BATCH):
        batch = jobs[start:start + BATCH]
        scores += await asyncio.gather(*(_run(source, task, script, "builtin-suite", runtime)
                                         for task, script in batch))
    return scores


def test_every_reference_solution_scores_one_and_doing_nothing_zero() -> None:
    source = _source()
    tasks = source.load("all")
    jobs = [(t, t.metadata["solution"]) for t in tasks] + [(t, None) for t in tasks]
    scores = asyncio.run(_scores(source, jobs))
    solved, untouched = scores[:len(tasks)], scores[len(tasks):]
    assert [t.id for t, s in zip(tasks, solved, strict=True) if (s.reward, s.passed) != (1.0, True)] == []
    assert [t.id for t, s in zip(tasks, untouched, strict=True) if (s.reward, s.passed) != (0.0, False)] == []


@pytest.mark.e2e  # 196 docker sandboxes: ~80 s on the 2-core machine (make test-e2e)
@pytest.mark.docker
def test_every_reference_solution_scores_one_as_a_non_root_user_in_the_pod_layout() -> None:
    """As a Kubernetes pod under the restricted Pod Security profile runs them: no docker --init, ``sleep infinity``
    as PID 1, every command through exec, uid 1000 (runtime.user), files written as that user."""
    requires("docker")
    source = _source()
    tasks = source.load("all")
    runtime = DockerRuntime(kind="docker", description="pod layout, non-root", layout="pod", user="1000:1000")
    scores = asyncio.run(_scores(source, [(t, t.metadata["solution"]) for t in tasks], runtime))
    assert [t.id for t, s in zip(tasks, scores, strict=True) if (s.reward, s.passed) != (1.0, True)] == []


PARTIAL_CASES = [  # (template key, seed, what the agent did, reward)
    ("create-edit-write-file", 1, "echo 'the text is: piano stone 92' > draft.txt", 0.5),
    ("create-edit-write-file", 1, "echo 'Piano Stone 92' > draft.txt", 0.5),
    ("create-edit-write-file", 1, "echo hello > draft.txt", 0.1),
    ("create-edit-append-line", 1, "echo '- feather glacier' > plan.txt", 0.0),
    ("create-edit-append-line", 1, "sed -i 1d plan.txt; echo '- feather glacier' >> plan.txt", 0.3333),
    ("create-edit-replace-value", 1, "sed -i 's/marble/cactus/; /port/d' settings.ini", 0.4),
    ("search-count-count-lines", 1, "wc -l plan.txt > total.txt", 0.5),
    ("search-count-extract-lines", 1, "grep INFO app.log | head -n 1 > info.txt", 0.25),
    ("json-csv-csv-column", 1, "cut -d, -f3 staff.csv > city.txt", 0.4706),
    ("json-csv-json-write", 2, "echo '{\"name\": \"Bruno\", \"age\": \"45\"}' > user.json", 0.25),
    ("fix-script-fix-operator", 1, "printf 'print(45)\\n' > calc.py", 0.3333),
    ("multi-step-backup-copy", 1, "mkdir copies && mv log.txt copies/", 0.0),
    ("multi-step-backup-copy", 1, "mkdir copies && touch copies/log.txt", 0.5),
    ("multi-step-sort-and-count", 1, "sort guests.txt > order.txt", 0.5),
    ("multi-step-make-files", 2, "mkdir pieces && echo ocean > pieces/ocean.txt", 0.3333),
    ("answer-lookup", 1, "grep Liam phonebook.txt > answer.txt", 0.5),
]


def test_partial_credit() -> None:
    source = _source()
    by_id = {t.id: t for t in source.load("all")}
    tasks = [by_id[f"{key}-{seed}"] for key, seed, _, _ in PARTIAL_CASES]
    scores = asyncio.run(_scores(source, [(t, case[2]) for t, case in zip(tasks, PARTIAL_CASES, strict=True)]))
    assert [s.reward for s in scores] == [case[3] for case in PARTIAL_CASES]
    assert not any(s.passed for s in scores)


# ---------------------------------------------------------------- flat task files
def test_example_task_file_loads_through_env_path() -> None:
    source = _source(f"env.path={EXAMPLE}")
    assert source.splits() == [] and source.default_split("eval") is None
    taskset = load_tasks(_env(f"env.path={EXAMPLE}"), purpose="eval")
    tasks = {t.id: t for t in taskset.tasks}
    assert taskset.split is None and len(tasks) == 7
    assert isinstance(tasks["hello-file"].verifier, ShellVerifier)
    assert tasks["hello-file"].verify == 'shell: test "$(cat hello.txt)" = "hello world"'
    assert [t.name for t in tasks["mail-reply"].tools] == ["list_inbox", "read_email", "send_email"]
    assert tasks["mail-reply"].tool_state["mailbox"]["inbox"][1]["body"] == "FYI the design review is in room 4B."


def test_task_file_splits_and_fields(tmp_path: Path) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text("- {id: a, instruction: do a, split: train, setup: echo hi, category: x}\n"
                    "- {id: b, instruction: do b, split: test, verifier: {kind: python, function: 'm:f'},"
                    " files: {in.txt: data}, timeout_s: 30}\n"
                    "- {id: c, instruction: do c}\n")
    file = read_task_file(path)
    assert file.splits() == ["train", "test", "all"]
    assert [t.id for t in file.tasks("train")] == ["a"] and [t.id for t in file.tasks("all")] == ["a", "b", "c"]
    a, b, _ = file.tasks(None)
    assert (a.setup, a.category, a.verifier) == (["echo hi"], "x", None)
    assert (b.verify, b.files, b.timeout_s) == ("python: m:f", {"in.txt": "data"}, 30)
    source = _source(f"env.path={path}")
    assert [source.default_split(p) for p in ("eval", "train", "rollout")] == ["test", "train", "test"]
    assert [t.id for t in load_tasks(_env(f"env.path={path}"), purpose="eval").tasks] == ["b"]


@pytest.mark.parametrize(("content", "message"), [
    ("- id: a\n  instruction: do a\n- id: b\n  instruction: do: b\n", ":4: not valid YAML"),
    ("- id: a\n  instruction: do a\n\n- id: b\n  verify: 'true'\n", ":4: the task has no `instruction`"),
    ("- instruction: do a\n", ":1: the task has no `id`"),
    ("- id: a\n  instruction: do a\n  vrify: 'true'\n", ":3: unknown key `vrify`"),
    ("- id: a\n  instruction: do a\n- id: a\n  instruction: again\n", ":3: task id `a` is used twice"),
    ("- id: a\n  instruction: do a\n  files: [x.txt]\n", ":3: `files` must be a mapping"),
    ("- id: a\n  instruction: do a\n  verifier: {kind: nope}\n", ":3: task a: unknown verifier kind 'nope'"),
    ("- id: a\n  instruction: do a\n  tools: [{name: t}]\n", ":3: task a: invalid tool spec"),
    ("- id: a\n  instruction: do a\n  verify: 'true'\n  verifier: {kind: shell, command: 'true'}\n",
     ":4: give either `verify`"),
    ("id: a\ninstruction: do a\n", ":1: a task file is a YAML list of tasks"),
    ("- just a string\n", ":1: a task is a mapping"),
])
def test_task_file_errors_name_file_and_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    with pytest.raises(UserError) as error:
        read_task_file(path)
    assert error.value.exit_code == 2 and error.value.message.startswith(f"{path}{message}"), error.value.message


def test_missing_task_file(tmp_path: Path) -> None:
    with pytest.raises(UserError) as error:
        load_tasks(_env(f"env.path={tmp_path / 'none.yaml'}"))
    assert error.value.exit_code == 2 and error.value.message == f"{tmp_path / 'none.yaml'}: task file does not exist"


def _summary(task: Task) -> tuple[object, ...]:
    verifier = task.verifier
    args = verifier.args if isinstance(verifier, PythonVerifier) else None
    return (task.id, _content(task), task.verify, args, task.tools, task.tool_state, task.category, task.metadata)


def test_tasks_written_to_a_task_file_read_back_the_same(tmp_path: Path) -> None:
    for name, entries in (("suite", [(t, s) for s, tasks in generate(BuiltinOptions()).items() for t in tasks]),
                          ("example", list(read_task_file(EXAMPLE).entries))):
        path = tmp_path / f"{name}.yaml"
        path.write_text(dump_tasks(entries))
        back = read_task_file(path).entries
        assert [(_summary(t), s) for t, s in back] == [(_summary(t), s) for t, s in entries]
    with pytest.raises(ValueError, match="task b: binary files"):
        task_entry(Task(id="b", instruction="x", files={"a.bin": b"\0"}))


def test_script_exports_a_task_file_that_env_path_runs(tmp_path: Path) -> None:
    out = tmp_path / "more.yaml"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "builtin-tasks.py"), "--seed", "10",
                           "--test-per-template", "2", "--split", "test", "--export", str(out)],
                          capture_output=True, text=True, check=True)
    assert done.stdout == f"wrote 112 tasks to {out} (run them with env.path={out})\n"
    taskset = load_tasks(_env(f"env.path={out}"), purpose="eval")
    assert taskset.split == "test" and [t.id for t in taskset.tasks] == [
        t.id for t in generate(BuiltinOptions(seed=10, test_per_template=2))["test"]]
