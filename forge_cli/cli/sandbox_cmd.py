"""``forge sandbox cleanup [RUN]``: remove the sandboxes a run (or every run) left behind."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from forge_cli.cli.common import JsonFlag

app = typer.Typer(help="Manage rollout sandboxes (local, docker, kubernetes).", no_args_is_help=True)

KINDS = ("local", "docker", "kubernetes")


@app.command("cleanup")
def cleanup(
    run: Annotated[str | None, typer.Argument(help="Run id; all forge runs when omitted.", show_default=False)] = None,
    runtime: Annotated[list[str] | None, typer.Option(
        "--runtime", "-r", help="Backend(s) to clean: local, docker, kubernetes (default: local and docker, "
        "docker skipped when no daemon answers).")] = None,
    namespace: Annotated[str | None, typer.Option(help="Kubernetes namespace.")] = None,
    context: Annotated[str | None, typer.Option(help="Kubernetes context.")] = None,
    docker_host: Annotated[str | None, typer.Option(help="Docker daemon address.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Remove sandboxes labelled with RUN (forge.run=RUN): containers, pods, network policies, temp dirs."""
    import asyncio

    from forge_cli.cli.runtime_common import load_runtime
    from forge_cli.errors import UserError
    from forge_cli.runtime.base import SandboxUnavailable
    from forge_cli.runtime.registry import cleanup as cleanup_backend

    explicit = bool(runtime)
    kinds = list(runtime or ["local", "docker"])
    for kind in kinds:
        if kind not in KINDS:
            raise UserError(f"unknown runtime '{kind}'", f"use one of: {', '.join(KINDS)}", exit_code=2)
    report: dict[str, list[str] | str] = {}
    for kind in kinds:
        overrides = {"docker": {"docker_host": docker_host},
                     "kubernetes": {"namespace": namespace, "context": context}}.get(kind, {})
        config = load_runtime(kind, **overrides)
        try:
            report[kind] = asyncio.run(cleanup_backend(run, config))
        except SandboxUnavailable as error:
            if explicit:
                raise
            report[kind] = f"skipped: {error.message}"
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    target = f"run {run}" if run else "all runs"
    for kind, removed in report.items():
        if isinstance(removed, str):
            typer.echo(f"{kind}: {removed}")
        else:
            typer.echo(f"{kind}: removed {len(removed)} sandbox(es) of {target}"
                       + (f": {', '.join(removed)}" if removed else ""))
