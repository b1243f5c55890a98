"""Backend lookup by ``runtime.kind``: the Sandbox class its options class names (``RuntimeOptions.sandbox``,
``forge_cli/config/runtimes.py``), imported lazily (docker, kubernetes are heavy)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from forge_cli.config.runtimes import RUNTIMES
from forge_cli.errors import UserError
from forge_cli.runtime.base import Sandbox
from forge_cli.runtime.spec import SandboxSpec


def backend(kind: str) -> type[Sandbox]:
    """The Sandbox class of a registered runtime kind (forge's: ``local``, ``docker``, ``kubernetes``)."""
    try:
        options = RUNTIMES.get(kind)
    except ValueError:
        raise UserError(f"unknown sandbox runtime '{kind}'", f"use one of: {', '.join(RUNTIMES.names())}",
                        exit_code=2) from None
    module, _, name = options.sandbox.partition(":")
    cls: type[Sandbox] = getattr(importlib.import_module(module), name)
    return cls


async def create_sandbox(spec: SandboxSpec, runtime: Any, *, log_dir: Path | None = None) -> Sandbox:
    """Create the sandbox for ``spec`` with the backend ``runtime`` (a LocalRuntime/DockerRuntime/... config)."""
    return await backend(runtime.kind).create(spec, runtime, log_dir=log_dir)


async def cleanup(run_id: str | None, runtime: Any) -> list[str]:
    """Remove what ``run_id`` (every forge run when None) left behind on ``runtime``'s backend."""
    return await backend(runtime.kind).cleanup(run_id, runtime)
