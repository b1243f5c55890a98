"""The verifiers of the builtin suite: async functions ``fn(ctx, **args)`` that read the workspace after the run.

Every template names one of these (through ``PythonVerifier("forge_cli.envs.builtin.checks:<fn>", args)``)
with its expected values as ``args``. Each returns a :class:`Score` whose ``passed`` is ``reward == 1.0``, and
each keeps the suite's credit rules:

- the full result scores 1.0; nothing done (the workspace as the task left it) scores exactly 0.0;
- a near miss earns :data:`PARTIAL` at most (the answer written among other text, the right lines in the wrong
  order or with extra ones, the right change with collateral damage, an output file with the wrong content);
- a non-empty output file that is wrong earns :data:`ATTEMPT` (it was written where the task asked).

Text is compared line by line with runs of whitespace collapsed and blank lines dropped; answers also ignore
surrounding quotes and, unless ``case``, letter case. A path that is missing, a directory, or below a regular
file reads as absent. Commands of :func:`outputs` run in the workdir, each under :data:`RUN_TIMEOUT_S`.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from forge_cli.envs.verifier import Score, VerifyContext

PARTIAL = 0.5
ATTEMPT = 0.1
RUN_TIMEOUT_S = 10.0


# ---------------------------------------------------------------- helpers
async def read(ctx: VerifyContext, path: str) -> str | None:
    """``path`` of the workspace as text, or None when there is no regular file there."""
    try:
        return await ctx.read_text(path)
    except (NotADirectoryError, PermissionError):
        return None


def lines_of(content: str) -> list[str]:
    """The non-blank lines of ``content``, each with its runs of whitespace collapsed to one space."""
    return [" ".join(line.split()) for line in content.splitlines() if line.strip()]


def scored(reward: float, **details: Any) -> Score:
    """A Score that passes exactly when the reward is 1.0."""
    return Score(reward=round(reward, 4), passed=reward == 1.0, details=details)


def _clean(content: str) -> str:
    return " ".join(lines_of(content)).strip().strip("\"'`").strip()


def _same(got: str, want: str, case: bool, numeric: bool) -> bool:
    if numeric:
        try:
            return float(got) == float(want)
        except ValueError:
            return False
    return got == want if case else got.lower() == want.lower()


def _mentions(got: str, want: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(want)}(?!\w|\.\d)", got, re.IGNORECASE) is not None


def _f1(got: list[str], want: list[str]) -> float:
    common = sum((Counter(got) & Counter(want)).values())
    return 0.0 if common == 0 else 2 * common / (len(got) + len(want))


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 1.0


# ---------------------------------------------------------------- checks
async def answer(ctx: VerifyContext, path: str, expected: list[str], case: bool = False,
                 numeric: bool = False) -> Score:
    """``path`` holds one of ``expected`` (1.0), mentions one among other text (PARTIAL), holds something else
    (ATTEMPT), or is missing/empty (0.0). ``numeric``: compared as numbers (``7`` equals ``7.0``)."""
    content = await read(ctx, path)
    if content is None:
        return scored(0.0, path=path, verdict="missing")
    got = _clean(content)
    if any(_same(got, want, case, numeric) for want in expected):
        return scored(1.0, path=path, verdict="right")
    if any(_mentions(got, want) for want in expected):
        return scored(PARTIAL, path=path, verdict="mentions the answer", got=got[:200])
    return scored(ATTEMPT if got else 0.0, path=path, verdict="wrong" if got else "empty", got=got[:200])


async def lines(ctx: VerifyContext, path: str, expected: list[str], ordered: bool = True) -> Score:
    """``path`` holds exactly the lines ``expected`` (in order unless not ``ordered``): 1.0; otherwise PARTIAL
    times the F1 of its lines against them (at least ATTEMPT when it is not empty); missing: 0.0."""
    content = await read(ctx, path)
    if content is None:
        return scored(0.0, path=path, verdict="missing")
    got, want = lines_of(content), lines_of("\n".join(expected))
    if got == want or (not ordered and sorted(got) == sorted(want)):
        return scored(1.0, path=path, verdict="right")
    f1 = _f1(got, want)
    reward = max(ATTEMPT, PARTIAL * f1) if got else 0.0
    return scored(reward, path=path, verdict="wrong lines", f1=round(f1, 4), got=got[:20])


async def edit(ctx: VerifyContext, path: str, original: list[str], expected: list[str]) -> Score:
    """``path`` (which started as ``original``) now reads ``expected``: 1.0. Otherwise PARTIAL times the share of
    the wanted changes made (lines to add present, lines to drop gone) times the share of the lines to keep still
    there, so an untouched file scores 0.0; a deleted one too."""
    content = await read(ctx, path)
    if content is None:
        return scored(0.0, path=path, verdict="missing")
    got, want, before = lines_of(content), lines_of("\n".join(expected)), lines_of("\n".join(original))
    if got == want:
        return scored(1.0, path=path, verdict="right")
    changes = [line in got for line in want if line not in before] + [line not in got for line in before
                                                                       if line not in want]
    kept = [line in got for line in want if line in before]
    changed, intact = _mean([float(c) for c in changes]), _mean([float(k) for k in kept])
    return scored(PARTIAL * changed * intact, path=path, verdict="not as expected", changes_made=changed,
                  lines_kept=intact, got=got[:20])


async def files(ctx: VerifyContext, goals: dict[str, str | None], keep: dict[str, str] | None = None) -> Score:
    """Each goal path holds its content (1; a file with other content: PARTIAL; missing: 0), or is absent when
    its content is None (1, else 0). The reward is the mean over the goals times the share of ``keep`` paths
    that still hold their content (files the task must not touch)."""
    subscores: dict[str, float] = {}
    for path, want in goals.items():
        content = await read(ctx, path)
        if want is None:
            subscores[path] = 1.0 if content is None else 0.0
        elif content is None:
            subscores[path] = 0.0
        else:
            subscores[path] = 1.0 if lines_of(content) == lines_of(want) else PARTIAL
    kept: list[float] = []
    for path, want in (keep or {}).items():
        content = await read(ctx, path)
        kept.append(float(content is not None and lines_of(content) == lines_of(want)))
    reward = _mean(list(subscores.values())) * _mean(kept)
    return Score(reward=round(reward, 4), passed=reward == 1.0, subscores=subscores,
                 details={"kept": _mean(kept)})


async def outputs(ctx: VerifyContext, cases: list[list[str]]) -> Score:
    """Each ``[command, stdout]`` case: the command, run with bash in the workdir, exits 0 and prints that
    (compared line by line). The reward is the share of the cases that do."""
    results: dict[str, float] = {}
    for command, want in cases:
        run = await ctx.run(command, timeout=min(RUN_TIMEOUT_S, ctx.timeout_s))
        results[command] = float(run.ok and lines_of(run.stdout) == lines_of(want))
    reward = _mean(list(results.values()))
    return Score(reward=round(reward, 4), passed=reward == 1.0, subscores=results)


async def json_object(ctx: VerifyContext, path: str, expected: dict[str, Any]) -> Score:
    """``path`` holds a JSON object equal to ``expected``: 1.0; another object: PARTIAL times the share of the
    expected keys it has with the right value (at least ATTEMPT); anything else non-empty: ATTEMPT."""
    content = await read(ctx, path)
    if content is None:
        return scored(0.0, path=path, verdict="missing")
    try:
        value = json.loads(content)
    except ValueError:
        return scored(ATTEMPT if content.strip() else 0.0, path=path, verdict="not JSON", got=content[:200])
    if value == expected:
        return scored(1.0, path=path, verdict="right")
    if not isinstance(value, dict):
        return scored(ATTEMPT, path=path, verdict="not a JSON object", got=content[:200])
    share = _mean([float(key in value and value[key] == want) for key, want in expected.items()])
    return scored(max(ATTEMPT, PARTIAL * share), path=path, verdict="other object", keys_right=share)
