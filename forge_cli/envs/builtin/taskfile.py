"""Flat task files (``env.path`` of the builtin source): a YAML list of tasks.

Each entry is a mapping with ``id`` and ``instruction`` (required) and optionally ``files`` (relative path ->
text), ``setup`` (a command or a list of them), ``verify`` (a shell command: exit 0 = 1.0) or ``verifier`` (a
mapping with a ``kind``, see ``forge_cli/envs/verifier.py``), ``hidden_files``, ``tools``, ``tool_state``,
``category``, ``template`` (the task's type: evaluation intervals resample types), ``seen`` (true when the training
split has tasks of that type, false when it has none), ``guided`` (true when the instruction shows the command that
solves it), ``split``, ``image``, ``timeout_s``, ``verifier_timeout_s`` and ``metadata``. Any other key is an error
(typos surface). Example: ``forge_cli/envs/examples/tasks.yaml``.

Splits: the names the entries give in ``split``, plus ``all``; a file where no entry has one has no splits. An
entry without ``split`` in a file that has splits is only in ``all``.

Every problem is a ``UserError`` (exit code 2) starting ``<path>:<line>:``, the line of the entry or of the
offending key. :func:`dump_tasks` writes tasks in this format (``scripts/builtin-tasks.py --export``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from forge_cli.envs.task import Task
from forge_cli.envs.verifier import Verifier, parse_verifier
from forge_cli.envs.verifiers import PythonVerifier, ShellVerifier
from forge_cli.errors import UserError
from forge_cli.tools.spec import parse_tools

FIELDS = ("id", "instruction", "files", "setup", "verify", "verifier", "hidden_files", "tools", "tool_state",
          "category", "template", "seen", "guided", "split", "image", "timeout_s", "verifier_timeout_s", "metadata")
FIX = "see forge_cli/envs/builtin/taskfile.py for the format, forge_cli/envs/examples/tasks.yaml for an example"


@dataclass(frozen=True)
class TaskFile:
    """The tasks of one file, each with its split (None: in no named split)."""

    path: Path
    entries: tuple[tuple[Task, str | None], ...]

    def splits(self) -> list[str]:
        """The split names the entries give, in file order, then ``all``; empty when none gives one."""
        named = list(dict.fromkeys(split for _, split in self.entries if split is not None))
        return [*named, "all"] if named else []

    def tasks(self, split: str | None) -> list[Task]:
        """The tasks of ``split`` (None or ``all``: every task)."""
        return [task for task, own in self.entries if split in (None, "all") or own == split]


class _Entry:
    """One entry of the file with the line numbers of it and its keys, for error messages."""

    def __init__(self, path: Path, node: yaml.Node, value: Any) -> None:
        self.path, self.node, self.value = path, node, value
        self.lines: dict[str, int] = {}
        if isinstance(node, yaml.MappingNode):
            self.lines = {str(key.value): key.start_mark.line + 1 for key, _ in node.value}

    def where(self, key: str | None = None) -> str:
        line = self.lines.get(key, self.node.start_mark.line + 1) if key else self.node.start_mark.line + 1
        return f"{self.path}:{line}"

    def error(self, message: str, key: str | None = None) -> UserError:
        return UserError(f"{self.where(key)}: {message}", fix=FIX, exit_code=2)

    def get(self, key: str, kind: type | tuple[type, ...], what: str, default: Any = None) -> Any:
        value = self.value.get(key, default)
        if value is not None and not isinstance(value, kind):
            raise self.error(f"`{key}` must be {what}", key)
        return value


def _texts(entry: _Entry, key: str) -> dict[str, str | bytes]:
    value = entry.get(key, Mapping, "a mapping of path -> text", {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise entry.error(f"`{key}` must map each path to its text", key)
    return dict(value)


def _task(entry: _Entry) -> tuple[Task, str | None]:
    if not isinstance(entry.value, Mapping):
        raise entry.error("a task is a mapping with at least `id` and `instruction`")
    unknown = [key for key in entry.value if key not in FIELDS]
    if unknown:
        raise entry.error(f"unknown key `{unknown[0]}` (known: {', '.join(FIELDS)})", str(unknown[0]))
    for key in ("id", "instruction"):
        if entry.value.get(key) in (None, ""):
            raise entry.error(f"the task has no `{key}`")
    task_id = entry.get("id", (str, int), "a string")
    instruction = entry.get("instruction", str, "a string")
    if "verify" in entry.value and "verifier" in entry.value:
        raise entry.error("give either `verify` (a shell command) or `verifier` (a mapping), not both", "verifier")
    key = "verifier" if "verifier" in entry.value else "verify"
    where = f"{entry.where(key)}: task {task_id}"
    setup = entry.get("setup", (str, list), "a command or a list of commands", [])
    setup = [setup] if isinstance(setup, str) else setup
    if not all(isinstance(command, str) for command in setup):
        raise entry.error("`setup` must be a command or a list of commands", "setup")
    limits = {name: entry.get(name, int, "a number of seconds") for name in ("timeout_s", "verifier_timeout_s")}
    task = Task(
        id=str(task_id), instruction=instruction, files=_texts(entry, "files"), setup=setup,
        verifier=parse_verifier(entry.value.get(key), where),
        hidden_files=_texts(entry, "hidden_files"), image=entry.get("image", str, "an image name"),
        category=entry.get("category", str, "a string", ""),
        template=entry.get("template", str, "a string"), seen=entry.get("seen", bool, "true or false"),
        guided=entry.get("guided", bool, "true or false"),
        tools=parse_tools(entry.value.get("tools"), f"{entry.where('tools')}: task {task_id}"),
        tool_state=dict(entry.get("tool_state", Mapping, "a mapping", {})),
        timeout_s=limits["timeout_s"], verifier_timeout_s=limits["verifier_timeout_s"],
        metadata=dict(entry.get("metadata", Mapping, "a mapping", {})))
    split = entry.get("split", str, "a split name")
    return task, split


def read_task_file(path: str | Path) -> TaskFile:
    """The task file at ``path``; UserError (exit 2) naming the file and line of the first problem."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise UserError(f"{path}: task file does not exist", fix="set env.path to a YAML task file, or leave it "
                        "unset for the generated suite", exit_code=2)
    loader = yaml.SafeLoader(path.read_text(encoding="utf-8"))
    try:
        root = loader.get_single_node()
        values = loader.construct_document(root) if root is not None else []
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        raise UserError(f"{path}{line}: not valid YAML ({exc.problem or exc})", fix=FIX, exit_code=2) from None
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML ({exc})", fix=FIX, exit_code=2) from None
    finally:
        loader.dispose()
    if root is None:
        return TaskFile(path=path, entries=())
    if not isinstance(root, yaml.SequenceNode) or not isinstance(values, list):
        raise UserError(f"{path}:{root.start_mark.line + 1}: a task file is a YAML list of tasks", fix=FIX,
                        exit_code=2)
    entries: list[tuple[Task, str | None]] = []
    seen: dict[str, str] = {}
    for node, value in zip(root.value, values, strict=True):
        entry = _Entry(path, node, value)
        task, split = _task(entry)
        if task.id in seen:
            raise entry.error(f"task id `{task.id}` is used twice (first at {seen[task.id]})", "id")
        seen[task.id] = entry.where("id")
        entries.append((task, split))
    return TaskFile(path=path, entries=tuple(entries))


def _verifier_entry(verifier: Verifier) -> dict[str, Any]:
    if isinstance(verifier, PythonVerifier) and isinstance(verifier.function, str):
        entry: dict[str, Any] = {"kind": "python", "function": verifier.function, "args": verifier.args}
    elif isinstance(verifier, ShellVerifier):
        entry = {"kind": "shell", "command": verifier.command, **({"env": verifier.env} if verifier.env else {})}
    else:
        raise ValueError(f"cannot write a `{verifier.describe()}` verifier to a task file")
    return entry | ({"pass_threshold": verifier.pass_threshold} if verifier.pass_threshold != 1.0 else {})


def task_entry(task: Task, split: str | None = None) -> dict[str, Any]:
    """``task`` as a task-file entry (fields at their defaults left out); ValueError for what the format cannot
    hold: binary files, or a verifier other than shell or python (named by ``pkg.module:fn``)."""
    if any(isinstance(content, bytes) for content in (*task.files.values(), *task.hidden_files.values())):
        raise ValueError(f"task {task.id}: binary files cannot be written to a task file")
    entry: dict[str, Any] = {
        "id": task.id, "instruction": task.instruction, "files": dict(task.files), "setup": list(task.setup),
        "verifier": _verifier_entry(task.verifier) if task.verifier is not None else None,
        "hidden_files": dict(task.hidden_files), "tools": [tool.model_dump(mode="json") for tool in task.tools],
        "tool_state": dict(task.tool_state), "category": task.category, "template": task.template,
        "seen": task.seen, "guided": task.guided, "split": split, "image": task.image,
        "timeout_s": task.timeout_s, "verifier_timeout_s": task.verifier_timeout_s, "metadata": dict(task.metadata)}
    return {key: value for key, value in entry.items() if value not in (None, "", [], {})}


def dump_tasks(tasks: Iterable[tuple[Task, str | None]]) -> str:
    """``(task, split)`` pairs as the text of a task file that :func:`read_task_file` reads back to them."""
    entries = [task_entry(task, split) for task, split in tasks]
    return yaml.safe_dump(entries, sort_keys=False, allow_unicode=True, width=120)
