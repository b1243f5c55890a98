"""The teacher stand-in's command-line entry: an OpenAI-compatible server answering the builtin suite's **train**
tasks with their reference solutions (refusing val and test tasks).

    .venv/bin/python benchmarks/teacher_standin.py [--port 8500] [--key-env VAR] [--busy N] [-- env.options.seed=0 ...]

The server itself is ``forge_cli/testing/teacher_standin.py`` (``forge harness fingerprint`` and ``check`` run
their canary against it); this file re-exports it so that benchmarks and tests loading ``teacher_standin`` from
``benchmarks/`` keep working.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from forge_cli.testing.teacher_standin import (  # noqa: E402
    COMMAND_PARAMS,
    SHELL_NAMES,
    SUBMIT,
    TEXT_PROTOCOL,
    Known,
    Teacher,
    TeacherServer,
    _completion,
    _error,
    builtin_teacher,
    main,
    normalise,
    shell_tool,
    stream_chunks,
)

__all__ = ["COMMAND_PARAMS", "SHELL_NAMES", "SUBMIT", "TEXT_PROTOCOL", "Known", "Teacher", "TeacherServer",
           "_completion", "_error", "builtin_teacher", "main", "normalise", "shell_tool", "stream_chunks"]

if __name__ == "__main__":
    main()
