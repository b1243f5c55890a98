"""The verifiers forge ships: ``shell`` and ``python`` (the interface is in ``forge_cli/envs/verifier.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from forge_cli.envs.verifier import (
    Score,
    Verifier,
    VerifierError,
    VerifyContext,
    call_maybe_async,
    import_object,
)

TAIL = 2000
# exit codes of a command the shell could not run (not executable, not found) or killed by a signal: the
# verifier itself failed, which is an infra error and not the agent's fault
_CANNOT_RUN = {126, 127}


class ShellVerifier(Verifier, kind="shell"):
    """A bash command run in the workdir after the harness exited: exit 0 scores 1.0, anything else 0.0.

    Partial credit: the command may write a number in [0, 1] to ``$FORGE_REWARD_FILE`` (a path created after the
    harness's processes were killed); that number is the reward and ``passed`` is ``reward >= pass_threshold``.
    Exit codes 126/127 (the command could not run) and death by a signal are verifier failures (infra errors).
    """

    def __init__(self, command: str, pass_threshold: float = 1.0, env: dict[str, str] | None = None) -> None:
        if not isinstance(command, str) or not command.strip():
            raise TypeError("`command` must be a non-empty shell command")
        self.command = command
        self.pass_threshold = float(pass_threshold)
        self.env = dict(env or {})

    def describe(self) -> str:
        return f"shell: {self.command}"

    async def score(self, ctx: VerifyContext) -> Score:
        check = await ctx.run(self.command, env=self.env)
        ctx.log(f"exit {check.exit_code} timed_out={check.timed_out}\n--- stdout\n{check.stdout[-TAIL:]}"
                f"\n--- stderr\n{check.stderr[-TAIL:]}")
        details: dict[str, Any] = {"command": self.command, "exit_code": check.exit_code,
                                   "stdout": check.stdout[-TAIL:], "stderr": check.stderr[-TAIL:]}
        if check.timed_out:
            raise VerifierError(f"verifier command timed out after {ctx.timeout_s}s")
        if check.exit_code is None or check.exit_code in _CANNOT_RUN or check.exit_code >= 128:
            raise VerifierError(f"verifier command could not run (exit {check.exit_code}): {check.stderr[-300:]}")
        written = await ctx.read_text(ctx.reward_file)
        if written is not None and written.strip():
            try:
                reward = float(written.strip().split()[0])
            except ValueError:
                raise VerifierError(f"reward file holds {written.strip()[:80]!r}, not a number") from None
            details["reward_file"] = reward
            return Score(reward=reward, passed=reward >= self.pass_threshold, details=details)
        passed = check.exit_code == 0
        return Score(reward=1.0 if passed else 0.0, passed=passed, details=details)


class PythonVerifier(Verifier, kind="python"):
    """A Python function ``fn(ctx: VerifyContext)`` named ``pkg.module:fn`` (or given directly), sync or async,
    returning a :class:`Score`, a bool (pass/fail) or a reward in [0, 1] (``passed``: reward >= pass_threshold).
    ``args`` are passed as keyword arguments after the context."""

    def __init__(self, function: str | Callable[..., Any], args: dict[str, Any] | None = None,
                 pass_threshold: float = 1.0) -> None:
        self.name = function if isinstance(function, str) else f"{function.__module__}:{function.__qualname__}"
        self.function = function
        self.args = dict(args or {})
        self.pass_threshold = float(pass_threshold)

    def describe(self) -> str:
        return f"python: {self.name}"

    async def score(self, ctx: VerifyContext) -> Score:
        fn = self.function
        if isinstance(fn, str):
            fn = import_object(fn, f"verifier {self.name}")
        if not callable(fn):
            raise VerifierError(f"{self.name} is not callable")
        fn_ = fn
        value = await call_maybe_async(lambda c: fn_(c, **self.args), ctx)
        return Score.of(value, self.pass_threshold)
