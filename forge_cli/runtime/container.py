"""What docker and kubernetes sandboxes share: commands run through one small ``/bin/sh`` wrapper.

The wrapper changes to the command's directory, exports the per-call environment, records its own
pid (container runtimes start every exec in a new session, so that pid is also the process group)
and ``exec``s the command. A timeout kills that group with a second exec. Backends only supply a
blocking ``_run_blocking(argv, emit, stdin)`` that runs argv in the container, streams its output
and returns the exit code.
"""

from __future__ import annotations

import abc
import re
import shlex
import uuid
from collections.abc import Callable
from typing import Any

from forge_cli.runtime.base import ExecHandle, Sandbox, Stream, ThreadedExecHandle

PID_DIR = "/tmp/.forge-exec"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
Emit = Callable[[Stream, bytes], None]


def _discard(stream: Stream, chunk: bytes) -> None:
    return None


def wrap_command(argv: list[str], env: dict[str, str], cwd: str, exec_id: str) -> list[str]:
    """``argv`` as a ``/bin/sh -c`` script that cds, exports ``env``, records its pid and execs."""
    for name in env:
        if not _ENV_NAME.match(name):
            raise ValueError(f"'{name}' is not a valid environment variable name")
    pid_file = f"{PID_DIR}/{exec_id}"
    lines = [
        f"cd {shlex.quote(cwd)} || exit 126",
        "unset OLDPWD",
        f"mkdir -p {PID_DIR} 2>/dev/null && echo $$ > {pid_file} 2>/dev/null",
        *(f"export {name}={shlex.quote(value)}" for name, value in env.items()),
        "exec " + shlex.join(argv),
    ]
    return ["/bin/sh", "-c", "\n".join(lines)]


def kill_command(exec_id: str) -> list[str]:
    """Kill the process group recorded by :func:`wrap_command` (and the process, should it have left it)."""
    pid_file = f"{PID_DIR}/{exec_id}"
    return ["/bin/sh", "-c", f"p=$(cat {pid_file} 2>/dev/null) && {{ kill -9 -$p; kill -9 $p; }} 2>/dev/null; "
                             f"rm -f {pid_file}; exit 0"]


class ContainerSandbox(Sandbox):
    """A sandbox that is one long-lived container into which commands are exec'd."""

    async def _start_exec(self, argv: list[str], env: dict[str, str], cwd: str) -> ExecHandle:
        exec_id = uuid.uuid4().hex
        wrapped = wrap_command(argv, env, cwd, exec_id)

        def reader(emit: Emit) -> int | None:
            return self._run_blocking(wrapped, emit)

        def killer() -> Any:
            return self._run_blocking(kill_command(exec_id), _discard)

        return ThreadedExecHandle(reader, killer, self.spec.name)

    @abc.abstractmethod
    def _run_blocking(self, argv: list[str], emit: Emit, stdin: bytes | None = None) -> int | None:
        """Run argv in the container (blocking; called in a worker thread), stream output, return the exit code."""
