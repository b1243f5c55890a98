"""The ``Verifier`` extension point: how a finished rollout is scored.

A verifier turns what a rollout left behind into a :class:`Score`: ``reward`` in [0, 1], ``passed`` (the
benchmark's own pass rule), ``subscores`` and ``details``. It gets a :class:`VerifyContext`: the sandbox
(read files, run commands), the task, the rollout's call records, its tool dispatches and tool-service state,
the URLs of the env's services and the harness's final output.

Contract every implementation keeps (``tests/envs/test_verifier_conformance.py`` checks each one):

- ``score`` is called once, after the harness exited and **every process it left in the sandbox was killed**;
  ``ctx.reward_dir`` is a directory created after that kill (the agent could never write there).
- A rollout the verifier could not judge — it crashed, timed out, or could not reach what it needs — raises
  :class:`VerifierError` (any other exception is wrapped into one). The rollout then ends ``infra_error`` with
  the traceback in ``rollouts/<id>/verifier.log``; it is **never** scored 0.
- ``describe()`` says in one line what runs (shown by dry runs).

Implementations register by ``kind`` when their class is defined (``class MyVerifier(Verifier, kind="mine")``),
so adding one touches no central list; task files name them by kind (``verifier: {kind: python, function:
"pkg.module:fn"}``) or by dotted path of the class (``verifier: {kind: "pkg.module:MyVerifier", ...}``).
Shipped: ``shell`` (a command; exit 0 = 1.0, or partial credit through ``$FORGE_REWARD_FILE``) and ``python``
(a function given the context). The benchmark adapters add their own.
"""

from __future__ import annotations

import abc
import asyncio
import importlib
import inspect
import math
import secrets
import traceback
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from forge_cli.errors import UserError
from forge_cli.plugins import Registry

if TYPE_CHECKING:
    from forge_cli.envs.task import Task
    from forge_cli.runtime.base import ExecResult, Sandbox


class VerifierError(Exception):
    """The verifier could not judge the rollout (crash, timeout, unreachable dependency): an infra error."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


@dataclass(frozen=True)
class Score:
    """A verifier's verdict on one rollout."""

    reward: float
    passed: bool
    subscores: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.reward, int | float) or math.isnan(self.reward) or not 0.0 <= self.reward <= 1.0:
            raise VerifierError(f"reward {self.reward!r} is not a number in [0, 1]")

    def to_dict(self) -> dict[str, Any]:
        return {"reward": float(self.reward), "passed": bool(self.passed), "subscores": dict(self.subscores),
                "details": dict(self.details)}

    @classmethod
    def of(cls, value: Score | float | bool, threshold: float = 1.0) -> Score:
        """A Score from what a Python verifier returned: a Score, a bool (pass/fail) or a reward."""
        if isinstance(value, Score):
            return value
        if isinstance(value, bool):
            return cls(reward=1.0 if value else 0.0, passed=value)
        if isinstance(value, int | float):
            return cls(reward=float(value), passed=float(value) >= threshold)
        raise VerifierError(f"a verifier returned {type(value).__name__}, not a Score, bool or number")


@dataclass
class VerifyContext:
    """Everything a verifier may look at. Built by the rollout runner after the harness's processes are killed."""

    sandbox: Sandbox
    task: Task
    rollout_id: str
    # a directory in the sandbox created after the harness's processes were killed; reward files go here
    reward_dir: str
    # seconds the whole verification may take
    timeout_s: float
    # how the harness ended ("ok", "agent_error", "timeout") and the tail of its stdout (its final answer)
    harness_status: str = "ok"
    final_output: str = ""
    # the tool server's view of the rollout (every dispatch and the builtin services' final state), if any
    tool_state: dict[str, Any] | None = None
    # env services as the sandbox reaches them: name -> URL
    services: dict[str, str] = field(default_factory=dict)
    # the rollout's recorded model calls (CallRecord dicts), fetched on first use
    records: Callable[[], list[dict[str, Any]]] = field(default=lambda: [])
    # where verifier.log is written (None: nowhere)
    log_path: Path | None = None
    # further environment variables for verifier commands (e.g. FORGE_TOOL_STATE)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def reward_file(self) -> str:
        """Where a shell verifier may write a reward in [0, 1] for partial credit (``$FORGE_REWARD_FILE``)."""
        return f"{self.reward_dir}/reward.txt"

    def log(self, text: str) -> None:
        """Append ``text`` to the rollout's verifier.log."""
        if self.log_path is not None:
            with self.log_path.open("a", encoding="utf-8") as f:
                f.write(text if text.endswith("\n") else text + "\n")

    def verify_env(self) -> dict[str, str]:
        """Environment variables every verifier command gets."""
        env = {"FORGE_REWARD_FILE": self.reward_file, "FORGE_REWARD_DIR": self.reward_dir,
               "FORGE_HARNESS_STATUS": self.harness_status}
        from forge_cli.envs.services import url_env

        return {**env, **url_env(self.services), **self.env}

    async def run(self, command: str, env: Mapping[str, str] | None = None, timeout: float | None = None,
                  cwd: str | None = None) -> ExecResult:
        """Run ``command`` with bash in the sandbox (workdir unless ``cwd``) with :meth:`verify_env`."""
        return await self.sandbox.exec(["bash", "-c", command], env={**self.verify_env(), **(env or {})},
                                       timeout=timeout or self.timeout_s, cwd=cwd)

    async def read_text(self, path: str) -> str | None:
        """A file of the sandbox as text (relative to the workdir), or None when it does not exist."""
        try:
            return (await self.sandbox.read_file(path)).decode("utf-8", "replace")
        except (FileNotFoundError, IsADirectoryError):
            return None


class Verifier(abc.ABC):
    """Scores a finished rollout. Subclass with ``kind="name"`` to register."""

    kind: ClassVar[str] = ""

    def __init_subclass__(cls, kind: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if kind:
            cls.kind = kind
            VERIFIERS.add(kind, cls)

    @abc.abstractmethod
    async def score(self, ctx: VerifyContext) -> Score:
        """The rollout's score; raise VerifierError when it cannot be judged."""

    @abc.abstractmethod
    def describe(self) -> str:
        """One line saying what runs (dry runs show it)."""

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any], where: str) -> Verifier:
        """Build the verifier of this kind from its task-file entry (keys besides ``kind``)."""
        try:
            return cls(**{k: v for k, v in spec.items() if k != "kind"})
        except TypeError as exc:
            raise UserError(f"{where}: verifier '{cls.kind}': {exc}", exit_code=2) from None


# verifiers by kind (forge_cli/plugins.py): the shipped ones found where they live (envs/verifiers.py, imported on the
# first lookup: this module imports none), an env's own when its module is imported, a package's through the
# entry-point group ``forge.verifiers``, ``pkg.module:Class`` for a user's own (verifier_class)
VERIFIERS: Registry[type[Verifier]] = Registry("verifier", Verifier, "forge.verifiers", own="envs/verifiers.py")


def verifier_class(kind: str, where: str = "verifier") -> type[Verifier]:
    """The verifier class registered as ``kind``, or named by a dotted path ``pkg.module:Class``."""
    if ":" not in kind and kind in VERIFIERS:
        return VERIFIERS.get(kind)
    obj = import_object(kind, where) if ":" in kind else None
    if isinstance(obj, type) and issubclass(obj, Verifier):
        return obj
    raise UserError(f"{where}: unknown verifier kind '{kind}'",
                    fix=f"use one of: {', '.join(VERIFIERS.names())}, or a dotted path pkg.module:VerifierClass",
                    exit_code=2)


def parse_verifier(entry: Any, where: str) -> Verifier | None:
    """A task file's ``verify`` (a shell command) or ``verifier`` ({kind: ..., ...}) entry as a Verifier."""
    if entry is None:
        return None
    if isinstance(entry, str):
        return verifier_class("shell", where).from_spec({"command": entry}, where)
    if isinstance(entry, Mapping) and isinstance(entry.get("kind"), str):
        return verifier_class(entry["kind"], where).from_spec(entry, where)
    raise UserError(f"{where}: a verifier is a shell command or a mapping with a `kind`", exit_code=2)


def import_object(path: str, where: str) -> Any:
    """``pkg.module:name`` imported; a clear UserError (exit 2) when it cannot be."""
    module_name, _, attr = path.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise UserError(f"{where}: cannot import '{path}' ({exc})",
                        fix="give an importable module and name as pkg.module:name", exit_code=2) from None


async def run_verifier(verifier: Verifier, ctx: VerifyContext) -> Score:
    """``verifier.score(ctx)`` under ``ctx.timeout_s``; anything that goes wrong is a VerifierError whose
    traceback is in the rollout's verifier.log."""
    ctx.log(f"=== {verifier.describe()}")
    try:
        score = await asyncio.wait_for(verifier.score(ctx), timeout=ctx.timeout_s)
        if not isinstance(score, Score):
            raise VerifierError(f"score() returned {type(score).__name__}, not a Score")
    except TimeoutError:
        ctx.log(f"verifier timed out after {ctx.timeout_s}s")
        raise VerifierError(f"verifier timed out after {ctx.timeout_s}s") from None
    except Exception as exc:
        ctx.log(traceback.format_exc())
        if isinstance(exc, VerifierError):
            raise
        raise VerifierError(f"verifier crashed: {type(exc).__name__}: {exc}") from exc
    ctx.log(f"score: {score.to_dict()}")
    return score


def new_reward_dir(home: str) -> str:
    """A fresh, unguessable directory path for one verification (created by the runner after the kill)."""
    return f"{home}/.forge-verify-{secrets.token_hex(8)}"


async def call_maybe_async(fn: Callable[..., Any], *args: Any) -> Any:
    """Call ``fn``; await the result when it is awaitable; run plain functions in a thread."""
    if inspect.iscoroutinefunction(fn):
        return await fn(*args)
    result = await asyncio.to_thread(fn, *args)
    if isinstance(result, Awaitable):
        return await result
    return result
