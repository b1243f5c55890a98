"""``forge serve``: run the policy server (vLLM) for the composed model config."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from forge_cli.cli.common import ConfigDir, JsonFlag, Overrides, load
from forge_cli.errors import UserError


def serve(
    overrides: Overrides = None,
    port: Annotated[int | None, typer.Option("--port", "-p", min=0, max=65535, help="Port to bind on 127.0.0.1 (0: a "
                                             "free one; default: model.port).")] = None,
    detach: Annotated[bool, typer.Option("--detach", "-d", help="Leave the server running in the background and "
                                         "return once it is healthy; stop it with --stop.")] = False,
    stop: Annotated[bool, typer.Option("--stop", help="Stop the detached server(s) started by `forge serve "
                                       "--detach` (only the one on --port if given), then exit.")] = False,
    timeout: Annotated[float, typer.Option("--timeout", min=1, help="Seconds to wait for the server to be healthy.")
                       ] = 900,
    config_dir: ConfigDir = None,
    json_out: JsonFlag = False,
) -> None:
    """Start vLLM's OpenAI-compatible server for the experiment's model, e.g. `forge serve model=smollm2-135m`.

    Waits until it is healthy, prints its URL, and serves until Ctrl-C or SIGTERM, then stops vLLM
    and all its processes. The default model is converted on first use.
    """
    if stop:
        _stop_detached(port, json_out)
        return
    from rich.console import Console

    from forge_cli.serve.server import start_server, state_dir

    console = Console(stderr=True, highlight=False)
    model = load(overrides, config_dir).experiment.model
    if not detach:  # SIGTERM during start-up too stops vLLM (start_server cleans up on the interrupt)
        signal.signal(signal.SIGTERM, _raise_interrupt)
        # a shell's background job inherits SIGINT as ignored: Ctrl-C / kill -INT must still stop vLLM
        signal.signal(signal.SIGINT, signal.default_int_handler)
    started = time.monotonic()
    with console.status("starting vLLM", spinner="dots") as status:
        def progress(message: str) -> None:
            status.update(message)
            if "convert" in message or "verified" in message:
                console.print(message, markup=False)

        server = start_server(model, port=port, detach=detach, timeout=timeout, log=progress)
    info = {"url": server.url, "base_url": server.base_url, "model": server.model, "pid": server.pid,
            "log": str(server.log_path), "model_path": str(server.launch.model_path),
            "ready_s": round(time.monotonic() - started, 1)}
    if detach:
        state_dir().mkdir(parents=True, exist_ok=True)
        (state_dir() / f"serve-{server.port}.json").write_text(json.dumps(info) + "\n")
    if json_out:
        typer.echo(json.dumps(info))
    else:
        typer.echo(f"serving {info['model_path']} as '{server.model}' at {server.base_url} "
                   f"(ready in {info['ready_s']} s; log {server.log_path})")
        typer.echo(f"stop it with: forge serve --stop --port {server.port}" if detach else "Ctrl-C to stop")
    if detach:
        return
    _serve_until_signal(server)


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _serve_until_signal(server: object) -> None:
    from forge_cli.serve.server import PolicyServer

    assert isinstance(server, PolicyServer)
    try:
        while server.alive():
            time.sleep(0.5)
    except KeyboardInterrupt:
        typer.echo("stopping vLLM", err=True)
        server.stop()
        return
    code = server.process.returncode
    server.stop()
    raise UserError(f"vLLM exited unexpectedly (exit status {code})", fix=f"see its log: {server.log_path}")


def _stop_detached(port: int | None, json_out: bool) -> None:
    from forge_cli.serve.server import health, state_dir, stop_group

    files = sorted(state_dir().glob(f"serve-{port}.json" if port else "serve-*.json"))
    if not files:
        where = f" on port {port}" if port else ""
        raise UserError(f"no detached forge server{where} is recorded in {state_dir()}",
                        fix="`forge serve --stop` without --port stops every one started with --detach", exit_code=2)
    stopped = []
    for path in files:
        info = json.loads(path.read_text())
        stop_group(int(info["pid"]))
        if health(info["url"], timeout=1):
            raise UserError(f"the server at {info['url']} still answers after stopping pid {info['pid']}")
        Path(path).unlink()
        stopped.append(info["url"])
    typer.echo(json.dumps({"stopped": stopped}) if json_out else "\n".join(f"stopped {url}" for url in stopped))
