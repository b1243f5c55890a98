"""Live progress of a run: done / running / failed, calls and tokens (rich), or nothing when quiet."""

from __future__ import annotations

from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from forge_cli.rollout.result import RolloutResult
from forge_cli.rollout.runner import RolloutJob


class RunProgress:
    def __init__(self, total: int, quiet: bool = False) -> None:
        self.quiet = quiet
        self.running = self.failed = self.calls = self.tokens = 0
        self.console = Console(stderr=True, highlight=False)
        self.bar = Progress(TextColumn("rollouts"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[stats]}"), TimeElapsedColumn(), console=self.console,
                            disable=quiet)
        self.task = self.bar.add_task("rollouts", total=total, stats="")
        self._refresh()

    def _refresh(self) -> None:
        self.bar.update(self.task, stats=f"running {self.running}  failed {self.failed}  "
                                         f"calls {self.calls}  tokens {self.tokens}")

    def say(self, message: str) -> None:
        if not self.quiet:
            self.bar.console.print(message, markup=False)

    def started(self, job: RolloutJob) -> None:
        self.running += 1
        self._refresh()

    def finished(self, result: RolloutResult, done: int, total: int) -> None:
        self.running -= 1
        self.failed += result.status != "ok"
        self.calls += result.calls
        self.tokens += result.prompt_tokens + result.completion_tokens
        self.bar.advance(self.task)
        self._refresh()
        reward = "-" if result.reward is None else f"{result.reward:g}"
        self.say(f"{result.rollout_id}: {result.status} reward {reward}, {result.calls} calls"
                 + (f" ({result.error.splitlines()[-1][:100]})" if result.error and result.status != "ok" else ""))

    def __enter__(self) -> RunProgress:
        self.bar.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.bar.__exit__(exc_type, exc, tb)
