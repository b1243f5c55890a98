"""The conformance kit of a tool session (``forge_cli/tools/session.py``).

    problems = asyncio.run(check_tool_session("mine", setup, [("my_tool", {"x": 1})], tmp_dir))
    assert not problems, problems

It resolves ``kind`` through the registry as forge does, then drives one instance through the lifecycle the tool
server gives it: ``start``, each call, an unknown tool (a tool error the agent sees, never an exception),
``state`` (JSON for the verifier), and ``close`` twice; and a second instance closed without a start (the
server closes a session whose start failed or never ran).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from forge_cli.tools.session import FIXED_KINDS, TOOL_SESSIONS, Outcome, ToolSession


def _json_problem(what: str, value: Any) -> list[str]:
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        return [f"{what} is not JSON: {exc}"]
    return []


def _outcome_problems(what: str, outcome: Any) -> list[str]:
    if not isinstance(outcome, Outcome):
        return [f"{what} returned {type(outcome).__name__}, not forge_cli.tools.session.Outcome"]
    problems = _json_problem(f"{what}'s result", outcome.result)
    if not isinstance(outcome.is_error, bool):
        problems.append(f"{what}'s is_error is {outcome.is_error!r}, not a bool")
    for image in outcome.images:
        if not (isinstance(image, tuple) and len(image) == 2 and all(isinstance(p, str) for p in image)):
            problems.append(f"{what}'s images hold {image!r}, not (media type, base64) pairs")
    return problems


async def check_tool_session(kind: str, setup: dict[str, Any], calls: list[tuple[str, dict[str, Any]]],
                             log_dir: Path) -> list[str]:
    """Problems of the tool session registered as ``kind``, run with ``setup`` (a task's ``tool_state.<kind>``)
    and the tool calls ``calls`` (name, arguments) that must succeed; ``log_dir`` is the rollout's log directory."""
    try:
        cls = TOOL_SESSIONS.get(kind)
    except ValueError as exc:
        return [str(exc)]
    problems: list[str] = []
    if kind in FIXED_KINDS:
        problems.append(f"{kind!r} is a backend kind every tool server has; a session needs another name")
    if not issubclass(cls, ToolSession) or cls.kind != kind:
        problems.append(f"{cls.__name__}.kind is {getattr(cls, 'kind', None)!r}, registered as {kind!r}")
    if cls.start_s < 0 or cls.state_s < 0:
        problems.append(f"{cls.__name__}: start_s and state_s are seconds (>= 0)")
    log_dir.mkdir(parents=True, exist_ok=True)
    session = cls(dict(setup), log_dir, "conformance-1")
    try:
        await session.start()
        for name, arguments in calls:
            outcome = await session.call(name, arguments)
            problems += _outcome_problems(f"call {name}", outcome)
            if isinstance(outcome, Outcome) and outcome.is_error:
                problems.append(f"call {name}({arguments}) failed: {outcome.result}")
        try:
            unknown = await session.call("no_such_tool_conformance", {})
        except Exception as exc:
            problems.append(f"an unknown tool raised {type(exc).__name__}: {exc} (the agent must get a tool error)")
        else:
            problems += _outcome_problems("an unknown tool", unknown)
            if isinstance(unknown, Outcome) and not unknown.is_error:
                problems.append("an unknown tool was not a tool error (is_error False)")
        state = await session.state()
        if not isinstance(state, dict):
            problems.append(f"state() returned {type(state).__name__}, not a dict")
        problems += _json_problem("state()", state)
    except Exception as exc:
        problems.append(f"the lifecycle raised {type(exc).__name__}: {exc}")
    finally:
        for attempt in ("close", "a second close"):
            try:
                await session.close()
            except Exception as exc:
                problems.append(f"{attempt} raised {type(exc).__name__}: {exc}")
    never_started = cls(dict(setup), log_dir, "conformance-2")
    try:
        await never_started.close()
    except Exception as exc:
        problems.append(f"close() without start() raised {type(exc).__name__}: {exc}")
    return problems
