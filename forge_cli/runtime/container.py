"""What docker and kubernetes sandboxes share: commands run through one small ``/bin/sh`` wrapper.

The wrapper changes to the command's directory, exports the per-call environment, records its own
pid (container runtimes start every exec in a new session, so that pid is also the process group)
and ``exec``s the command. A timeout kills that group with a second exec. Backends only supply a
blocking ``_run_blocking(argv, emit, stdin)`` that runs argv in the container, streams its output
and returns the exit code.
"""

from __future__ import annotations

import abc
import asyncio
import re
import shlex
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from forge_cli.runtime.base import (
    ExecHandle,
    ExecResult,
    Sandbox,
    SandboxError,
    SandboxGone,
    SandboxOutOfMemory,
    Stream,
    ThreadedExecHandle,
    blocking,
)

# each exec records its pid in PID_PREFIX + exec id (no directory: one process less per exec)
PID_PREFIX = "/tmp/.forge-exec-"
# the OOM killer's counter of the container's memory cgroup (v1, then v2)
OOM_COUNTERS = "cat /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/memory.events 2>/dev/null; exit 0"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# files through an exec, so they belong to the user commands run as (a pod's runAsUser): read (exit 2: missing, 21:
# a directory) and write (parents created; the content on stdin, its length as $2)
READ_SCRIPT = 'if [ -d "$1" ]; then exit 21; fi; if [ ! -e "$1" ]; then exit 2; fi; exec cat -- "$1"'
WRITE_SCRIPT = 'mkdir -p -- "$(dirname -- "$1")" && head -c "$2" > "$1"'
Emit = Callable[[Stream, bytes], None]


# kill every process of the container that forge did not start with it: every process outside the container's own
# session (session 1: PID 1 and what the container's command started, i.e. docker's --init, the idle `sleep` and
# forge's command runner with its per-command subshells, runner.py; in a pod the idle `sleep` is PID 1). Every
# command forge runs in the container gets a session of its own (docker/kube exec, or the runner's setsid) and no
# process can join another session, so the test cannot be faked by a name, a parent or a pid file. Zombies are
# skipped (already dead), this shell and its parent spared. A pass that found something is repeated (a fork loop
# keeps starting processes while /proc is walked; a killed process needs a moment to die), at most 100 times; what
# still runs then (a process it may not kill) fails the script with its pids, and the sandbox raises (the rollout
# is not verified). Plain POSIX sh and /proc: it runs in any image
KILL_ALL = """n=0
while [ "$n" -lt 100 ]; do
  n=$((n + 1)) found=
  for p in /proc/[0-9]*; do
    read -r line < "$p/stat" 2>/dev/null || continue
    pid=${p#/proc/}
    set -- ${line##*) }
    [ "$1" = Z ] || [ "$4" = 1 ] || [ "$pid" = "$$" ] || [ "$pid" = "$PPID" ] && continue
    kill -9 "$pid" 2>/dev/null; found="$found $pid"
  done
  [ -n "$found" ] || break
  sleep 0.05
done
[ -z "$found" ] || { echo "still running after the kill:$found" >&2; exit 1; }
exit 0"""


def _discard(stream: Stream, chunk: bytes) -> None:
    return None


def wrap_command(argv: list[str], env: dict[str, str], cwd: str, exec_id: str) -> list[str]:
    """``argv`` as a ``/bin/sh -c`` script that cds, exports ``env``, records its pid and execs."""
    for name in env:
        if not _ENV_NAME.match(name):
            raise ValueError(f"'{name}' is not a valid environment variable name")
    pid_file = f"{PID_PREFIX}{exec_id}"
    lines = [
        f"cd {shlex.quote(cwd)} || exit 126",
        "unset OLDPWD",
        f"echo $$ > {pid_file} 2>/dev/null",
        *(f"export {name}={shlex.quote(value)}" for name, value in env.items()),
        "exec " + shlex.join(argv),
    ]
    return ["/bin/sh", "-c", "\n".join(lines)]


def kill_command(exec_id: str) -> list[str]:
    """Kill the process group recorded by :func:`wrap_command` (and the process, should it have left it)."""
    pid_file = f"{PID_PREFIX}{exec_id}"
    return ["/bin/sh", "-c", f"p=$(cat {pid_file} 2>/dev/null) && {{ kill -9 -$p; kill -9 $p; }} 2>/dev/null; "
                             f"rm -f {pid_file}; exit 0"]


@dataclass
class ContainerState:
    running: bool
    oom_killed: bool = False
    # e.g. "exited, exit code 137", "removed", "DeadlineExceeded"
    detail: str = ""


def parse_oom_kills(text: str) -> int:
    return sum(int(n) for n in re.findall(r"^oom_kill (\d+)$", text, re.MULTILINE))


class ContainerSandbox(Sandbox):
    """A sandbox that is one long-lived container into which commands are exec'd."""

    _oom_kills = 0

    async def _check_alive(self, result: ExecResult) -> None:
        state = await blocking(self._container_state)
        if state.running and not result.timed_out and result.exit_code in (None, 137):
            # a container being killed can still report itself running for a moment
            await asyncio.sleep(0.3)
            state = await blocking(self._container_state)
        memory = self.spec.resources.memory
        if not state.running:
            if state.oom_killed:
                raise SandboxOutOfMemory(f"sandbox {self.spec.name} ran out of memory (limit {memory})", result=result)
            if time.monotonic() >= self.deadline:
                raise SandboxGone(f"sandbox {self.spec.name} ran past its deadline of {self.spec.timeout_s}s",
                                  status="timeout", result=result)
            raise SandboxGone(f"sandbox {self.spec.name} stopped under the command ({state.detail})", result=result)
        if result.exit_code == 137:
            # SIGKILL inside a live container: the OOM killer at the memory limit, or the command's own doing
            chunks: list[bytes] = []
            await blocking(self._run_blocking, ["/bin/sh", "-c", OOM_COUNTERS],
                                    lambda _s, chunk: chunks.append(chunk))
            kills = parse_oom_kills(b"".join(chunks).decode(errors="replace"))
            if kills > self._oom_kills:
                self._oom_kills = kills
                raise SandboxOutOfMemory(f"a command in sandbox {self.spec.name} was killed for running out of "
                                         f"memory (limit {memory})", result=result)

    async def _kill_processes(self) -> None:
        errors: list[bytes] = []
        code = await blocking(self._run_blocking, ["/bin/sh", "-c", KILL_ALL],
                              lambda stream, chunk: errors.append(chunk) if stream == "stderr" else None)
        if code not in (0, None):
            detail = b"".join(errors).decode(errors="replace").strip() or f"exit {code}"
            raise SandboxError(f"sandbox {self.spec.name}: the agent's processes could not all be killed before "
                               f"verification ({detail})")

    async def _exec_write_file(self, path: str, data: bytes) -> None:
        """Write ``path`` through an exec as the sandbox's user (parents created), as a pod's files are written."""
        chunks: list[bytes] = []
        code = await blocking(self._run_blocking, ["/bin/sh", "-c", WRITE_SCRIPT, "sh", path, str(len(data))],
                              lambda _s, chunk: chunks.append(chunk), data)
        if code != 0:
            raise SandboxError(f"writing {path} in sandbox {self.spec.name} failed: "
                               f"{b''.join(chunks).decode(errors='replace').strip()}")

    async def _exec_read_file(self, path: str) -> bytes:
        out: list[bytes] = []
        err: list[bytes] = []

        def collect(stream: Stream, chunk: bytes) -> None:
            (out if stream == "stdout" else err).append(chunk)

        code = await blocking(self._run_blocking, ["/bin/sh", "-c", READ_SCRIPT, "sh", path], collect)
        if code == 2:
            raise FileNotFoundError(path)
        if code == 21:
            raise IsADirectoryError(path)
        if code != 0:
            raise SandboxError(f"reading {path} in sandbox {self.spec.name} failed: "
                               f"{b''.join(err).decode(errors='replace').strip()}")
        return b"".join(out)

    @abc.abstractmethod
    def _container_state(self) -> ContainerState:
        """Whether the container still runs (blocking; called in a worker thread)."""

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
