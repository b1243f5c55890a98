"""Running the package managers during a bundle install: captured output, a log, clear failures."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class StepFailed(Exception):
    """A command of the install failed; ``output`` holds what it printed (stdout and stderr)."""

    def __init__(self, argv: Sequence[str], returncode: int, output: str) -> None:
        super().__init__(f"{' '.join(argv[:3])} ... exited with {returncode}")
        self.argv = list(argv)
        self.returncode = returncode
        self.output = output

    def tail(self, lines: int = 15) -> str:
        return "\n".join(self.output.strip().splitlines()[-lines:])


def run(
    argv: Sequence[str],
    *,
    log: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 1800,
) -> str:
    """Run ``argv``; append the command and its output to ``log``; raise StepFailed on failure."""
    started = time.monotonic()
    full_env = dict(os.environ)
    full_env.update(env or {})
    try:
        proc = subprocess.run(
            list(argv), env=full_env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, errors="replace", timeout=timeout, check=False,
        )
        output, code = proc.stdout, proc.returncode
    except subprocess.TimeoutExpired as exc:
        raw = exc.stdout or b""
        output = (raw.decode(errors="replace") if isinstance(raw, bytes) else raw) + f"\n(timed out after {timeout}s)"
        code = 124
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as fh:
        fh.write(f"$ {' '.join(argv)}\n{output}\n(exit {code}, {time.monotonic() - started:.1f}s)\n\n")
    if code != 0:
        raise StepFailed(argv, code, output)
    return output




def is_elf(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(4) == b"\x7fELF"
