"""``forge proxy``: run the capture proxy in the foreground."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Annotated

import typer


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _bindable(host: str, port: int) -> bool:
    """Whether the proxy could listen on ``host:port`` now (an unknown host is left to the proxy's own check)."""
    import socket

    from forge_cli.ports import bindable

    try:
        return bindable(host, port)
    except socket.gaierror:
        return True


def proxy(
    upstream: Annotated[str, typer.Option("--upstream", "-u", help="Policy server URL(s), comma-separated.")],
    port: Annotated[int, typer.Option("--port", "-p", min=0, max=65535,
                                      help="Port to listen on (0: a free one).")] = 0,
    store: Annotated[Path | None, typer.Option("--store", help="SQLite trace store (default: a new file under "
                                               "$FORGE_HOME/proxy/).")] = None,
    host: Annotated[str, typer.Option("--host", help="Address to bind (keep loopback).")] = "127.0.0.1",
    max_body_mb: Annotated[int, typer.Option("--max-body-mb", min=1,
                                             help="Largest request body accepted, in MiB.")] = 32,
    max_output_tokens: Annotated[int | None, typer.Option(
        "--max-output-tokens", min=1,
        help="Cap on requested output tokens (default: the upstream's context length).")] = None,
    weight_version: Annotated[str, typer.Option("--weight-version", help="Weight version stamped on records.")] = "0",
    upstream_timeout_s: Annotated[float, typer.Option(
        "--upstream-timeout", min=1, help="Seconds to wait for the policy server's response headers.")] = 900.0,
    max_header_kb: Annotated[int, typer.Option(
        "--max-header-kb", min=1, help="Largest request header block accepted, in KiB.")] = 64,
    admin_token_env: Annotated[str | None, typer.Option(
        "--admin-token-env", help="Take the admin token from this environment variable (a deployment's secret) "
        "instead of a new random one; forge runs using this proxy as proxy.url read the same variable.",
        show_default=False)] = None,
) -> None:
    """Serve and record model calls at http://HOST:PORT/r/<rollout-id>/v1 until Ctrl-C."""
    from forge_cli.errors import UserError
    from forge_cli.proxy.launcher import start_proxy

    if store is not None and store.is_dir():
        raise UserError(f"--store {store} is a directory", fix="give a file path, e.g. --store run/traces.sqlite",
                        exit_code=2)
    if port and not _bindable(host, port):
        raise UserError(f"port {port} on {host} is already in use", fix="pick another with --port P, or 0 for a "
                        "free one", exit_code=2)
    token = None
    if admin_token_env is not None:
        token = os.environ.get(admin_token_env, "")
        if len(token) < 16:
            raise UserError(f"--admin-token-env {admin_token_env}: the variable is unset or shorter than 16 "
                            "characters", fix=f"export {admin_token_env}=$(python3 -c 'import secrets; "
                            "print(secrets.token_urlsafe(32))')", exit_code=2)
    handle = start_proxy(upstream, port=port, store=store, host=host, max_body_mb=max_body_mb,
                         max_output_tokens=max_output_tokens, weight_version=weight_version,
                         upstream_timeout_s=upstream_timeout_s, max_header_kb=max_header_kb, admin_token=token)
    typer.echo(f"forge proxy listening at {handle.url}  (upstream: {', '.join(handle.upstreams)})")
    typer.echo(f"  admin token: {handle.token_file}" + (f" (= ${admin_token_env})" if admin_token_env else ""))
    typer.echo(f"  trace store: {handle.store}")
    typer.echo(f"  log:         {handle.log_file}")
    typer.echo(f"  register a rollout: curl -s -X POST -H \"authorization: Bearer $(cat {handle.token_file})\" "
               f"{handle.url}/forge/v1/rollouts -d '{{\"task\": \"demo\"}}'")
    # explicit handlers: a shell's background job inherits SIGINT as ignored, and SIGTERM must flush too
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _interrupt)
    try:
        while handle.alive():
            time.sleep(0.5)
        typer.echo(f"forge proxy exited with status {handle.process.returncode}; see {handle.log_file}", err=True)
        raise typer.Exit(1)
    except KeyboardInterrupt:
        typer.echo("stopping the proxy (flushing records)…", err=True)
    finally:
        handle.stop()
