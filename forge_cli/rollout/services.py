"""The services a run needs: the policy server (started unless one is given), the capture proxy and, when a task
has tools, the tool server."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from forge_cli.config.schema import Experiment, OpenAICompatibleModel
from forge_cli.errors import UserError
from forge_cli.ports import bindable
from forge_cli.rollout.spec import proxy_endpoint
from forge_cli.runtime.spec import ProxyEndpoint

Log = Callable[[str], None]
# mitmdump imports for ~5 s on an idle core; on a loaded 2-core machine with several runs starting at once it
# took over 30 s (measured with 6 `forge rollout` processes starting together)
PROXY_READY_S = 180.0


@contextlib.contextmanager
def policy_server(exp: Experiment, log: Log) -> Iterator[str]:
    """The upstream URL: ``proxy.upstream``, the external endpoint, a healthy server already on the
    model's port, or a vLLM server started here (and stopped on exit)."""
    from forge_cli.serve.server import health, start_server

    if exp.proxy.upstream:
        yield exp.proxy.upstream
        return
    model = exp.model
    if isinstance(model, OpenAICompatibleModel):
        yield model.base_url.removesuffix("/v1").rstrip("/")
        return
    existing = f"http://{model.host}:{model.port}"
    if model.port and health(existing):
        log(f"using the policy server already running at {existing}")
        yield existing
        return
    log(f"starting the policy server ({model.source}) ...")
    # trainer.lora: the server serves the trained adapter under the model's name (forge_cli/serve/adapter.py)
    server = start_server(model, port=0, log=log, lora=exp.trainer.lora)
    try:
        log(f"policy server ready at {server.url}")
        yield server.url
    finally:
        server.stop()


def upstream_settings(exp: Experiment) -> dict[str, Any]:
    """What the proxy tells the upstream: the model name it expects (an external endpoint's ``model.model``, else
    the served name), whether to ask it for token ids, and the environment variable holding its API key."""
    model = exp.model
    if isinstance(model, OpenAICompatibleModel):
        return {"model": model.model, "capture": model.request_token_ids, "upstream_key_env": model.api_key_env}
    return {"model": model.served_name}


def check_proxy_port(exp: Experiment) -> None:
    """A fixed ``proxy.port`` already in use: UserError before anything starts (checked again at the start)."""
    port = exp.proxy.port
    if port and not _port_free(exp.proxy.host, port):
        raise UserError(f"proxy port {port} on {exp.proxy.host} is in use",
                        fix="stop what uses it, or pick another: proxy.port=0 (any free port) or proxy.port=N",
                        exit_code=2)


@contextlib.contextmanager
def capture_proxy(exp: Experiment, upstream: str, store: Path, sampling: dict[str, Any] | None = None,
                  rollout_header: bool = False) -> Iterator[tuple[Any, ProxyEndpoint]]:
    """The capture proxy recording into ``store`` and the endpoint sandboxes use to reach it; ``sampling``
    replaces the harness's sampling parameters on every call; ``rollout_header`` names each call's rollout to the
    upstream (a replay upstream; only a local single proxy)."""
    from forge_cli.proxy.launcher import free_port, start_proxy

    if exp.proxy.url:
        yield remote_proxy(exp, store)
        return
    if exp.proxy.replicas > 1:
        with local_replicas(exp, upstream, store, sampling) as sharded:
            yield sharded, sharded.replicas[0].endpoint
        return
    port = exp.proxy.port
    check_proxy_port(exp)
    handle = start_proxy(upstream, port=port or free_port(exp.proxy.host), store=store, host=exp.proxy.host,
                         max_body_mb=exp.proxy.max_body_mb, max_header_kb=exp.proxy.max_header_kb,
                         upstream_timeout_s=exp.proxy.upstream_timeout_s, max_output_tokens=exp.model.max_output_tokens,
                         sampling=sampling, ready_timeout_s=PROXY_READY_S, rollout_header=rollout_header,
                         **upstream_settings(exp))
    try:
        if not handle.alive():
            raise UserError(f"the capture proxy did not start; see {handle.log_file}")
        # the proxy read its admin token at start-up and forge holds it in memory: no copy stays on disk for a
        # sandbox to find (an unisolated local one sees the run directory)
        handle.token_file.unlink(missing_ok=True)
        yield handle, proxy_endpoint(exp, int(handle.url.rsplit(":", 1)[1]))
    finally:
        handle.stop()


def remote_proxy(exp: Experiment, store: Path) -> tuple[Any, ProxyEndpoint]:
    """``proxy.url``: the proxies forge did not start, each checked (it answers, it takes the token), and the
    endpoint the run's sandboxes use (several URLs: a ``ShardedProxy``, each rollout on one of them)."""
    import os

    from forge_cli.config.schema import upstream_urls
    from forge_cli.proxy.client import connect
    from forge_cli.proxy.shards import Replica, ShardedProxy

    assert exp.proxy.url is not None
    token_env = exp.proxy.admin_token_env
    urls = upstream_urls(exp.proxy.url)
    remotes = [connect(url, os.environ.get(token_env), token_env, store) for url in urls]
    if len(remotes) == 1:
        return remotes[0], proxy_endpoint(exp)
    endpoints = [proxy_endpoint(exp, url=url, replica=index) for index, url in enumerate(urls)]
    return ShardedProxy([Replica(r, e) for r, e in zip(remotes, endpoints, strict=True)]), endpoints[0]


@contextlib.contextmanager
def local_replicas(exp: Experiment, upstream: str, store: Path,
                   sampling: dict[str, Any] | None) -> Iterator[Any]:
    """``proxy.replicas`` local proxies (consecutive ports from ``proxy.port``, or free ones), each with its own
    store file under ``proxy/`` beside ``store``, as one ``ShardedProxy`` pulling into ``store``."""
    from forge_cli.proxy.client import RemoteProxy
    from forge_cli.proxy.launcher import free_port, start_proxy
    from forge_cli.proxy.shards import Replica, ShardedProxy

    check_proxy_port(exp)
    replicas: list[Replica] = []
    sharded: ShardedProxy | None = None
    try:
        for index in range(exp.proxy.replicas):
            port = exp.proxy.port + index if exp.proxy.port else free_port(exp.proxy.host)
            handle = start_proxy(upstream, port=port, store=store.parent / "proxy" / f"replica-{index}.sqlite",
                                 host=exp.proxy.host, max_body_mb=exp.proxy.max_body_mb,
                                 max_header_kb=exp.proxy.max_header_kb, upstream_timeout_s=exp.proxy.upstream_timeout_s,
                                 max_output_tokens=exp.model.max_output_tokens, sampling=sampling,
                                 ready_timeout_s=PROXY_READY_S, **upstream_settings(exp))
            handle.token_file.unlink(missing_ok=True)
            replicas.append(Replica(RemoteProxy(url=handle.url, admin_token=handle.admin_token, store=store),
                                    proxy_endpoint(exp, port), local_store=handle.store, stop=handle.stop))
        sharded = ShardedProxy(replicas)
        yield sharded
    finally:
        ShardedProxy(replicas).stop() if sharded is None else sharded.stop()


@contextlib.contextmanager
def tool_server(exp: Experiment, needed: bool, log: Log) -> Iterator[Any]:
    """The tool server (``exp.tools``) when some task has tools, else None."""
    if not needed:
        yield None
        return
    from forge_cli.runtime.registry import backend
    from forge_cli.tools.server import ToolServer

    settings = exp.tools
    backend(exp.runtime.kind).check_tool_server(exp.runtime, settings.advertise_host)
    try:
        server = ToolServer(settings.host, settings.port, settings.advertise_host)
    except OSError as exc:
        raise UserError(f"the tool server cannot listen on {settings.host}:{settings.port}: {exc.strerror}",
                        fix="pick another: tools.port=0 (any free port) or tools.port=N", exit_code=2) from None
    with server:
        log(f"tool server at {server.url} (task tools over MCP at /r/<rollout>/mcp, HTTP at /r/<rollout>/tools)")
        yield server


def _port_free(host: str, port: int) -> bool:
    """Whether the proxy could listen on ``host:port`` (bound as the proxy binds: see :mod:`forge_cli.ports`)."""
    import socket


    try:
        return bindable(host, port)
    except socket.gaierror:
        return True  # an unknown host is left to the proxy's own check
