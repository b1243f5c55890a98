"""Shared test helpers: run the real ``forge`` CLI in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def forge(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``python -m forge_cli ARGS`` as a user would, capturing output."""
    return subprocess.run(
        [sys.executable, "-m", "forge_cli", *args],
        capture_output=True, text=True, timeout=timeout, cwd=REPO,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )


# forge's example task file in the flat format (the old builtin tasks, and mail-reply with its mailbox tools)
EXAMPLE_TASKS = str(Path(__file__).resolve().parent.parent / "forge_cli" / "envs" / "examples" / "tasks.yaml")
