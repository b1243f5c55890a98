"""``forge proxy``: run the capture proxy in the foreground."""

from __future__ import annotations

import time
from pathlib import Path

import typer


def proxy(
    upstream: str = typer.Option(..., "--upstream", "-u", help="Policy server URL(s), comma-separated."),
    port: int = typer.Option(0, "--port", "-p", help="Port to listen on (0: a free one)."),
    store: Path | None = typer.Option(None, "--store", help="SQLite trace store (default: a new file under "
                                      "$FORGE_HOME/proxy/)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (keep loopback)."),
    max_body_mb: int = typer.Option(32, "--max-body-mb", help="Largest request body accepted, in MiB."),
    max_output_tokens: int | None = typer.Option(None, "--max-output-tokens",
                                                 help="Cap on requested output tokens (default: the upstream's "
                                                 "context length)."),
    weight_version: str = typer.Option("0", "--weight-version", help="Weight version stamped on records."),
) -> None:
    """Serve and record model calls at http://HOST:PORT/r/<rollout-id>/v1 until Ctrl-C."""
    from forge_cli.proxy.launcher import start_proxy

    handle = start_proxy(upstream, port=port, store=store, host=host, max_body_mb=max_body_mb,
                         max_output_tokens=max_output_tokens, weight_version=weight_version)
    typer.echo(f"forge proxy listening at {handle.url}  (upstream: {', '.join(handle.upstreams)})")
    typer.echo(f"  admin token: {handle.token_file}")
    typer.echo(f"  trace store: {handle.store}")
    typer.echo(f"  log:         {handle.log_file}")
    typer.echo(f"  register a rollout: curl -s -X POST -H \"authorization: Bearer $(cat {handle.token_file})\" "
               f"{handle.url}/forge/v1/rollouts -d '{{\"task\": \"demo\"}}'")
    try:
        while handle.alive():
            time.sleep(0.5)
        typer.echo(f"forge proxy exited with status {handle.process.returncode}; see {handle.log_file}", err=True)
        raise typer.Exit(1)
    except KeyboardInterrupt:
        typer.echo("stopping the proxy (flushing records)…", err=True)
    finally:
        handle.stop()
