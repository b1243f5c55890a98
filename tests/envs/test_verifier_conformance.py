"""The verifier conformance suite: every registered verifier kind, in a real sandbox, on a solved, an unsolved and
a broken rollout. Solved scores reward 1 and passed; unsolved reward 0 and not passed; broken (the verifier cannot
run, crashes or times out) raises VerifierError with the reason in verifier.log — never a reward of 0.

A new verifier kind must add its cases here: the suite fails for a registered kind without them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from forge_cli.envs.source import known_sources
from forge_cli.envs.task import Task
from forge_cli.envs.verifier import (
    VERIFIERS,
    Score,
    Verifier,
    VerifierError,
    VerifyContext,
    run_verifier,
    verifier_class,
)
from forge_cli.envs.verifiers import PythonVerifier, ShellVerifier
from forge_cli.runtime.local import LocalSandbox
from forge_cli.runtime.spec import SandboxSpec

HOME = "/tmp/forge-home"


@dataclass
class Case:
    """A verifier and the sandbox states it is tried on: solved, unsolved, broken (commands run first)."""

    verifier: Callable[[], Verifier]
    solved: list[str]
    unsolved: list[str] = field(default_factory=list)
    # a verifier that cannot judge (and what to run first)
    broken: Callable[[], Verifier] | None = None
    broken_state: list[str] = field(default_factory=list)
    runtime: str = "local"


async def answer_is_42(ctx: VerifyContext) -> Score:
    text = await ctx.read_text("answer.txt")
    return Score(reward=1.0 if (text or "").strip() == "42" else 0.0, passed=(text or "").strip() == "42")


def crashes(ctx: VerifyContext) -> float:
    raise RuntimeError("the grader's database is gone")


async def sleeps(ctx: VerifyContext) -> float:
    await asyncio.sleep(30)
    return 1.0


CASES: dict[str, list[Case]] = {
    "shell": [
        Case(lambda: ShellVerifier('test "$(cat answer.txt)" = 42'), ["echo 42 > answer.txt"], ["echo 41 > answer.txt"],
             broken=lambda: ShellVerifier("no-such-grader --check"), broken_state=[]),
        # partial credit through $FORGE_REWARD_FILE
        Case(lambda: ShellVerifier('grep -c x marks.txt | awk \'{print $1/2}\' > "$FORGE_REWARD_FILE"'),
             ["printf 'x\\nx\\n' > marks.txt"], ["printf 'y\\n' > marks.txt"],
             broken=lambda: ShellVerifier('echo lots > "$FORGE_REWARD_FILE"')),
    ],
    "python": [
        Case(lambda: PythonVerifier("tests.envs.test_verifier_conformance:answer_is_42"), ["echo 42 > answer.txt"],
             ["echo 7 > answer.txt"], broken=lambda: PythonVerifier("tests.envs.test_verifier_conformance:crashes")),
        Case(lambda: PythonVerifier(answer_is_42), ["echo 42 > answer.txt"], [],
             broken=lambda: PythonVerifier("tests.envs.test_verifier_conformance:sleeps")),
    ],
    "harbor": [],  # docker-only: tests/envs/test_harbor.py runs its cases (solved, unsolved, reward forged by agent)
    # the benchmark graders need a checkout (a stand-in one ships under tests/envs/) and a rollout's records or tool
    # dispatches, so their cases run through forge eval in their own suites: solved = the scripted reference policy
    # scores 1.0, unsolved = doing nothing fails, broken = a grader that raises is an infra error with its traceback
    "claweval": [],  # tests/envs/test_claweval.py
    "qwenclawbench": [],  # tests/envs/test_qwenclawbench.py
    # the page's reward in a real browser: solved = the scripted click, unsolved = a wrong click or none, broken =
    # a page that cannot be read (tests/envs/test_miniwob.py)
    "miniwob": [],
    # the benchmark judges through a scripted judge server (tests/envs/test_web_judged.py)
    "webjudge": [],
    # OSWorld's own evaluator on a real desktop: solved = each shipped task's reference actions score 1.0, unsolved
    # = doing nothing scores 0, broken = a desktop that stops answering is an infra error
    # (tests/envs/test_osworld_desktop.py, make test-e2e: it needs the desktop image)
    "osworld": [],
}


@contextlib.asynccontextmanager
async def sandbox(tmp_path: Path) -> AsyncIterator[LocalSandbox]:
    spec = SandboxSpec(run_id="conformance", rollout_id=f"v-{id(tmp_path)}", image="", workdir="/work",
                       env={"HOME": HOME})
    box = await LocalSandbox.create(spec, None, log_dir=tmp_path)
    try:
        yield box
    finally:
        await box.stop()


async def _score(tmp_path: Path, verifier: Verifier, state: list[str], timeout: float = 20) -> Score:
    async with sandbox(tmp_path) as box:
        for command in state:
            assert (await box.exec(["bash", "-c", command])).ok
        await box.kill_processes()
        reward_dir = f"{HOME}/.forge-verify-test"
        await box.exec(["mkdir", "-p", reward_dir])
        ctx = VerifyContext(sandbox=box, task=Task(id="t", instruction="x", verifier=verifier), rollout_id="t",
                            reward_dir=reward_dir, timeout_s=timeout, log_path=tmp_path / "verifier.log")
        return await run_verifier(verifier, ctx)


def test_every_registered_kind_has_cases() -> None:
    known_sources()  # every source forge ships imported: their verifiers registered, whatever ran before
    assert set(VERIFIERS) <= set(CASES), f"add conformance cases for {set(VERIFIERS) - set(CASES)}"
    assert {"shell", "python"} <= set(VERIFIERS)


@pytest.mark.parametrize(("kind", "index"), [(k, i) for k, cases in CASES.items() for i in range(len(cases))])
def test_verifier_conformance(kind: str, index: int, tmp_path: Path) -> None:
    case = CASES[kind][index]
    assert verifier_class(kind) is type(case.verifier())
    solved = asyncio.run(_score(tmp_path / "solved", case.verifier(), case.solved))
    assert (solved.reward, solved.passed) == (1.0, True)
    assert case.verifier().describe()
    unsolved = asyncio.run(_score(tmp_path / "unsolved", case.verifier(), case.unsolved))
    assert unsolved.reward < 1.0 and not unsolved.passed
    if case.unsolved and kind == "shell" and index == 1:
        assert unsolved.reward == 0.0
    if case.broken is not None:
        with pytest.raises(VerifierError):
            asyncio.run(_score(tmp_path / "broken", case.broken(), case.broken_state, timeout=2))
        assert (tmp_path / "broken" / "verifier.log").read_text().strip()


def test_a_crashing_verifier_leaves_its_traceback(tmp_path: Path) -> None:
    with pytest.raises(VerifierError, match="crashed: RuntimeError"):
        asyncio.run(_score(tmp_path, PythonVerifier(crashes), []))
    log = (tmp_path / "verifier.log").read_text()
    assert "Traceback" in log and "the grader's database is gone" in log


def test_a_reward_outside_0_1_is_a_verifier_error(tmp_path: Path) -> None:
    with pytest.raises(VerifierError, match="not a number in"):
        asyncio.run(_score(tmp_path, PythonVerifier(lambda ctx: 1.5), []))


def test_task_files_parse_verifiers_by_kind_and_dotted_path() -> None:
    from forge_cli.envs.verifier import parse_verifier
    from forge_cli.errors import UserError

    assert isinstance(parse_verifier("true", "f:1"), ShellVerifier)
    spec: dict[str, Any] = {"kind": "python", "function": "tests.envs.test_verifier_conformance:answer_is_42"}
    assert isinstance(parse_verifier(spec, "f:1"), PythonVerifier)
    assert isinstance(parse_verifier({"kind": "forge_cli.envs.verifiers:ShellVerifier", "command": "true"}, "f"),
                      ShellVerifier)
    with pytest.raises(UserError, match="unknown verifier kind 'nosuch'"):
        parse_verifier({"kind": "nosuch"}, "f:1")
    with pytest.raises(UserError, match="f:2: verifier 'shell'"):
        parse_verifier({"kind": "shell", "comand": "true"}, "f:2")
