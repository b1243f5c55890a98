"""Child processes that die with forge: a parent-death signal set between fork and exec (Linux)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1


_LASTING: set[int] = set()


def lives_with_process() -> None:
    """Declare the calling thread one that ends only with its process (a ``ThreadPoolExecutor`` initializer for a
    pool kept for the process's life), so children it starts may die with the process too."""
    _LASTING.add(threading.get_ident())


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the child receive ``sig`` when the forge process that started it dies, or None
    off the main thread and the threads declared ``lives_with_process`` (the parent-death signal follows the
    starting *thread*: one started from a short-lived worker thread would be killed when that thread ends)."""
    if threading.current_thread() is not threading.main_thread() and threading.get_ident() not in _LASTING:
        return None

    def preexec() -> None:  # pragma: no cover - runs in the child between fork and exec
        with contextlib.suppress(Exception):
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)

    return preexec
