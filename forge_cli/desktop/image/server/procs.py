"""Running commands for the forge-desktop server (stdlib only; see server.py).

Commands run as the server's own user with the server's environment (DISPLAY, the dbus session bus, HOME). A
command that outlives its time limit is killed together with everything it started (it runs in its own session,
and the whole process group is killed).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from typing import Any

# The most seconds a command of /execute or /setup/execute may run when the request names no limit.
DEFAULT_TIMEOUT_S = 120.0
# The most seconds any request may ask for.
MAX_TIMEOUT_S = 3600.0


class CommandError(ValueError):
    """A request's command is malformed (answered 400)."""


def python_executable() -> str:
    """The interpreter that a bare `python` / `python3` in a command means: the server's own.

    OSWorld's host sends pyautogui code as ["python", "-c", ...]; Debian has no `python` unless python-is-python3
    is installed, and the server's interpreter is the one that has pyautogui (in the image: /usr/bin/python3).
    """
    return sys.executable


def normalize_command(command: Any, shell: bool) -> str | list[str]:
    """The command as subprocess should get it: a string when shell is set, else an argument list.

    A string without shell is split the way a POSIX shell would; `~`-prefixed arguments are expanded; a leading
    bare `python` / `python3` runs the server's interpreter.
    """
    if isinstance(command, str):
        if not command.strip():
            raise CommandError("empty command")
        if shell:
            return command
        args = shlex.split(command)
    elif isinstance(command, list) and command and all(isinstance(a, str) for a in command):
        args = list(command)
    else:
        raise CommandError("command must be a non-empty string or a list of strings")
    if shell:
        # subprocess with shell=True runs args[0] as the script and passes the rest as $0, $1, ...
        return args
    args = [os.path.expanduser(a) if a.startswith("~") else a for a in args]
    if args[0] in ("python", "python3"):
        args[0] = python_executable()
    return args


def clamp_timeout(value: Any, default: float = DEFAULT_TIMEOUT_S) -> float:
    """A request's timeout as seconds within (0, MAX_TIMEOUT_S]; the default when absent or malformed."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return default
    if seconds != seconds or seconds <= 0:  # NaN or non-positive
        return default
    return min(seconds, MAX_TIMEOUT_S)


def _kill_group(proc: subprocess.Popen[Any]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def run(
    command: str | list[str],
    *,
    shell: bool,
    timeout: float,
    cwd: str | None = None,
    stdin_text: str | None = None,
) -> dict[str, Any]:
    """Run a command to completion; returns {status, output, error, returncode, timed_out}.

    status is "success" whatever the exit code (as OSWorld's host expects from /execute); a command that runs out
    of time is killed with its process group and answers returncode -1 with timed_out true.
    """
    proc = subprocess.Popen(
        command,
        shell=shell,
        cwd=cwd,
        stdin=subprocess.PIPE if stdin_text is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(stdin_text, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        message = f"command timed out after {timeout:g} seconds"
        return {
            "status": "error",
            "message": message,
            "output": out or "",
            "error": ((err or "") + ("\n" if err else "") + message),
            "returncode": -1,
            "timed_out": True,
        }
    return {"status": "success", "output": out, "error": err, "returncode": proc.returncode, "timed_out": False}


def _reap(proc: subprocess.Popen[Any]) -> None:
    proc.wait()


def launch(command: str | list[str], *, shell: bool, log_path: str | None = None) -> int:
    """Start a command in the background (its own session, output to log_path or nowhere); returns its pid.

    A daemon thread waits on it so that it never lingers as a zombie of the server.
    """
    sink: Any = subprocess.DEVNULL
    if log_path:
        sink = open(log_path, "ab")  # noqa: SIM115 - handed to the child, closed below
    try:
        proc = subprocess.Popen(
            command,
            shell=shell,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=sink,
            start_new_session=True,
            cwd=os.path.expanduser("~"),
        )
    finally:
        if sink is not subprocess.DEVNULL:
            sink.close()
    threading.Thread(target=_reap, args=(proc,), daemon=True).start()
    return proc.pid


def wait_until(predicate: Any, timeout: float, interval: float) -> tuple[bool, float]:
    """Poll predicate() until it is true or timeout passes; returns (ok, seconds waited)."""
    start = time.monotonic()
    interval = max(0.05, interval)
    while True:
        try:
            if predicate():
                return True, time.monotonic() - start
        except Exception:  # a probe that fails counts as unmet: probe again
            pass
        if time.monotonic() - start >= timeout:
            return False, time.monotonic() - start
        time.sleep(interval)
