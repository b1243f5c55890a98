"""Running OSWorld's own host code (``desktop_env``) for a desktop: in its own environment, one process per step.

``desktop-env`` and the libraries its evaluators import live in ``$FORGE_HOME/envs/osworld`` (``scripts/setup.sh
osworld``), apart from forge's environment as vLLM and mitmproxy are. forge runs
``forge_cli/remote/osworld/host_runner.py`` there (a standalone script: no forge imports) with the task's JSON and the
desktop's relayed ports; it answers with one JSON line on stdout and logs to stderr (kept in the rollout's
``desktop/<step>.log``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from forge_cli.errors import UserError
from forge_cli.paths import env_python, forge_home

HOST_RUNNER = Path(__file__).resolve().parents[1] / "remote" / "osworld" / "host_runner.py"
INSTALL = "scripts/setup.sh osworld"


def osworld_python() -> Path:
    """The Python of OSWorld's environment; UserError exit 1 with the install command when it is missing."""
    python = env_python("osworld")
    if not python.is_file():
        raise UserError(f"OSWorld's host code (desktop-env) is not installed ({python} is missing)", fix=INSTALL,
                        exit_code=1)
    return python


def default_cache_dir() -> Path:
    """Where task files are cached when ``env.cache_dir`` is unset (OSWorld's cache layout)."""
    return forge_home() / "osworld-cache"


async def run_host(command: str, task: dict[str, Any], ports: list[int], cache_dir: str | None, log_path: Path,
                   timeout_s: float, *extra: str) -> dict[str, Any]:
    """Run ``host_runner.py COMMAND`` for ``task`` on the desktop at ``ports`` (server, CDP, VLC); its JSON answer,
    or ``{"ok": False, "error": ...}`` when it failed, timed out or answered nothing."""
    try:
        python = osworld_python()
    except UserError as exc:
        return {"ok": False, "error": f"{exc.message} ({exc.fix})"}
    cache = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    fd, task_file = tempfile.mkstemp(prefix="forge-osworld-task-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(task, f)
    argv = [str(python), str(HOST_RUNNER), command, "--task", task_file, "--ports", ",".join(str(p) for p in ports),
            "--cache-dir", str(cache), *extra]
    try:
        with log_path.open("ab") as log:
            process = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, stderr=log,
                                                           stdin=asyncio.subprocess.DEVNULL, start_new_session=True)
            try:
                stdout, _ = await asyncio.wait_for(process.communicate(), timeout_s)
            except (TimeoutError, asyncio.CancelledError) as exc:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, 9)
                await process.wait()
                if isinstance(exc, asyncio.CancelledError):
                    raise
                return {"ok": False, "error": f"OSWorld's {command} ran past {timeout_s:.0f}s"}
    finally:
        with contextlib.suppress(OSError):
            os.unlink(task_file)
    for line in reversed(stdout.decode(errors="replace").splitlines()):
        with contextlib.suppress(ValueError):
            answer = json.loads(line)
            if isinstance(answer, dict):
                return answer
    return {"ok": False, "error": f"OSWorld's {command} answered nothing (exit {process.returncode})"}
