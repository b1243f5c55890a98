"""Ctrl-C and SIGTERM for the commands that run rollouts: both unwind the run cleanly (sandboxes removed, proxy
and policy server stopped) and end in one message saying where the finished work is, exit code 130."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from types import FrameType

from forge_cli.errors import UserError


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise Terminated


@contextlib.contextmanager
def stop_on_signals(where: Callable[[], str]) -> Iterator[None]:
    """Turn SIGTERM and SIGINT into a clean stop; ``where()`` says what was kept (printed after the stop)."""
    previous = signal.signal(signal.SIGTERM, _terminate)
    # a shell's background job inherits SIGINT as ignored: Ctrl-C / kill -INT must still stop the run
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    except KeyboardInterrupt as stop:
        how = "terminated (SIGTERM)" if isinstance(stop, Terminated) else "interrupted (Ctrl-C)"
        raise UserError(f"{how}; {where()}", exit_code=130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
