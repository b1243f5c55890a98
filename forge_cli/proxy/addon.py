"""forge's mitmproxy addon: serve ``/r/<rollout-id>/…`` model calls from the policy servers and record them.

Loaded by ``forge_cli.remote.mitmproxy.main`` (mitmproxy's proxy core in reverse mode, inside mitmproxy's own virtual
environment; ``launcher.py`` starts it). The addon declares the options and owns the hooks; each hook hands its
work to the module with that one responsibility:

==================  ===============================================================================
``routing``         which rollout and wire format a call is, admission, the request rewritten for the upstream
``auth``            rollout keys and the admin token (constant-time digests)
``control``         the control API under ``/forge/v1/`` (answered in the async ``request`` hook)
``upstream``        policy-server health probing and each call's upstream deadline
``recording``       answers judged and translated back, one record per call to the store writer process
``transport``       what mitmproxy has no hook for: slow clients, its own error pages, ending broken streams
==================  ===============================================================================

One addon delegating to modules, not one addon per module: mitmproxy calls every hook on every addon, and
``benchmarks/addon_dispatch.py`` measures what each extra addon costs per call (the figures are in
docs/proxy.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from mitmproxy import ctx, exceptions, http

from forge_cli.proxy import auth, guard, routing, transport, upstream, wire
from forge_cli.proxy.control import PREFIX as CONTROL_PREFIX
from forge_cli.proxy.control import Control
from forge_cli.proxy.metrics import Metrics
from forge_cli.proxy.recording import Recorder
from forge_cli.proxy.routing import Call
from forge_cli.proxy.sink import RecordSink
from forge_cli.proxy.state import Registry
from forge_cli.proxy.wire.base import Limits, openai_error

log = logging.getLogger("forge.proxy")


class ForgeProxy:
    """The addon. Options are declared in ``load`` and validated in ``configure``."""

    def __init__(self) -> None:
        self.registry = Registry([])
        self.metrics = Metrics()
        self.recorder = Recorder(self.metrics)
        self.control: Control | None = None
        self.limits = Limits()
        self.upstream_auth: bytes | None = None  # 'Bearer <the upstream's key>' (forge_upstream_key_env)
        self.rollout_header = False  # name each call's rollout to the upstream (forge_rollout_header)
        self.max_header_bytes = 65536
        self.deadlines = transport.ClientDeadlines()
        self.upstream_deadline = upstream.Deadline()
        self._resumed = asyncio.Event()  # set (and replaced) on each resume: paused calls wait on it
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def sink(self) -> RecordSink | None:
        return self.recorder.sink

    # -- options -------------------------------------------------------------------------------------
    def load(self, loader: Any) -> None:
        loader.add_option("forge_upstreams", str, "", "Comma-separated policy server URLs (first: reverse target).")
        loader.add_option("forge_store", str, "", "SQLite trace store path.")
        loader.add_option("forge_admin_token_file", str, "", "File holding the control API admin token.")
        loader.add_option("forge_max_output_tokens", int, 0, "Cap on requested output tokens (0: none).")
        loader.add_option("forge_model", str, "", "Model name forwarded upstream (empty: the client's).")
        loader.add_option("forge_upstream_timeout", int, 900, "Seconds to wait for upstream response headers, "
                          "then for the rest of a JSON answer, then between a stream's chunks.")
        loader.add_option("forge_client_timeout", int, 60, "Seconds a client may take to send one request whole "
                          "(headers and body) once it starts; slower ones get 408 (slow-loris).")
        loader.add_option("forge_max_header_kb", int, 64, "Largest request header block accepted, in KiB.")
        loader.add_option("forge_weight_version", str, "0", "Initial weight version stamped on records.")
        loader.add_option("forge_sampling", str, "", "JSON object of sampling parameters enforced on every call.")
        loader.add_option("forge_capture", bool, True, "Ask the upstream for token ids and logprobs (vLLM's fields; "
                          "off for an external API that rejects unknown fields).")
        loader.add_option("forge_upstream_key_env", str, "", "Environment variable holding the upstream's API key, "
                          "sent as 'Authorization: Bearer' (never recorded or logged; empty: none).")
        loader.add_option("forge_rollout_header", bool, False, "Name each call's rollout to the upstream in an "
                          "'x-forge-rollout' header (a replay upstream answers by rollout; off: not sent).")

    def configure(self, updated: set[str]) -> None:
        opts = ctx.options
        if "forge_upstreams" in updated:
            urls = [u for u in opts.forge_upstreams.split(",") if u.strip()]
            if not urls:
                raise exceptions.OptionsError("forge_upstreams: at least one policy server URL is required")
            self.registry = Registry(urls)
        if "forge_upstream_key_env" in updated:
            name = opts.forge_upstream_key_env
            key = os.environ.get(name, "") if name else ""
            if name and not key:
                raise exceptions.OptionsError(f"forge_upstream_key_env: ${name} is not set")
            self.upstream_auth = f"Bearer {key}".encode() if key else None
        if updated & {"forge_max_output_tokens", "forge_model", "forge_sampling", "forge_capture"}:
            if opts.forge_max_output_tokens < 0:
                raise exceptions.OptionsError("forge_max_output_tokens must be >= 0")
            try:
                sampling = json.loads(opts.forge_sampling) if opts.forge_sampling else {}
            except json.JSONDecodeError as exc:
                raise exceptions.OptionsError(f"forge_sampling is not JSON: {exc}") from None
            if not isinstance(sampling, dict):
                raise exceptions.OptionsError("forge_sampling must be a JSON object")
            self.limits = Limits(max_output_tokens=opts.forge_max_output_tokens, model=opts.forge_model,
                                 sampling=sampling, capture=opts.forge_capture)
        if "forge_rollout_header" in updated:
            self.rollout_header = bool(opts.forge_rollout_header)
        if "forge_max_header_kb" in updated:
            if opts.forge_max_header_kb <= 0:
                raise exceptions.OptionsError("forge_max_header_kb must be > 0")
            self.max_header_bytes = opts.forge_max_header_kb * 1024
        if "forge_upstream_timeout" in updated:
            if opts.forge_upstream_timeout <= 0:
                raise exceptions.OptionsError("forge_upstream_timeout must be > 0")
            self.upstream_deadline.timeout_s = float(opts.forge_upstream_timeout)
        if "forge_client_timeout" in updated:
            if opts.forge_client_timeout <= 0:
                raise exceptions.OptionsError("forge_client_timeout must be > 0")
            self.deadlines.timeout = float(opts.forge_client_timeout)
        if "forge_weight_version" in updated:
            self.registry.weight_version = opts.forge_weight_version
        if "forge_store" in updated or "forge_admin_token_file" in updated:
            if not opts.forge_store:
                raise exceptions.OptionsError("forge_store: a trace store path is required")
            token_file = Path(opts.forge_admin_token_file)
            if not opts.forge_admin_token_file or not token_file.is_file():
                raise exceptions.OptionsError(f"forge_admin_token_file: no such file {opts.forge_admin_token_file!r}")
            if self.recorder.sink is None:
                self.recorder.sink = RecordSink(opts.forge_store)
            self.control = Control(self.registry, self.recorder.sink, self.metrics, opts.forge_store,
                                   auth.digest(token_file.read_text().strip()), self._resume)
        if self.control is not None:
            self.control.registry = self.registry

    def running(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(upstream.probe(self.registry)), loop.create_task(self.deadlines.watch())]

    def done(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self.recorder.sink is not None:
            self.recorder.sink.close()

    # -- hooks ---------------------------------------------------------------------------------------
    def client_connected(self, client: Any) -> None:
        self.deadlines.connected(client.id)

    def client_disconnected(self, client: Any) -> None:
        self.deadlines.disconnected(client.id)

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        """Route and authenticate before the body is read; rejections are answered in ``request``."""
        if flow.request.path.startswith(CONTROL_PREFIX):
            flow.metadata["forge_control"] = True
            return
        call = routing.admit(flow, self.registry, self.max_header_bytes)
        flow.metadata["forge"] = call
        self.deadlines.headers(flow.client_conn.id, call.fmt)

    async def request(self, flow: http.HTTPFlow) -> None:
        self.deadlines.read(flow.client_conn.id)
        if flow.metadata.get("forge_control"):
            await self._control(flow)
            return
        call: Call | None = flow.metadata.get("forge")
        if call is None:
            return
        if call.reject is not None:
            self._reject(flow, call, *call.reject)
            return
        if wire.route(call.path) is None and routing.is_models_listing(flow, call):
            self._forward(flow, call, "/v1/models", record=False)
            return
        rejection = routing.prepare(flow, call, self.limits)
        if rejection is not None:
            self._reject(flow, call, *rejection)
            return
        while self.registry.paused:  # new calls wait out a weight update; calls in flight finish
            await self._resumed.wait()
        self._forward(flow, call, call.upstream_path)

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        call: Call | None = flow.metadata.get("forge")
        if call is None or call.prep is None or flow.response is None:
            return
        call.t_first_byte = call.t_last = time.time()  # the deadline now waits for the body (a stream: each chunk)
        resp = flow.response
        if resp.status_code == 200 and "text/event-stream" in resp.headers.get("content-type", ""):
            self.recorder.stream(flow, call)

    def response(self, flow: http.HTTPFlow) -> None:
        self.deadlines.answered(flow.client_conn.id)
        call: Call | None = flow.metadata.get("forge")
        if call is None or call.prep is None or flow.response is None or call.recorded:
            return
        self.recorder.answered(flow, call)

    def error(self, flow: http.HTTPFlow) -> None:
        """Connection-level failures; for streams this can arrive instead of ``response`` (Codex closes early).
        Without a response yet, mitmproxy answers the client itself next (in the call's shape: ``transport``)."""
        self.deadlines.answered(flow.client_conn.id)
        message = flow.error.msg if flow.error else "unknown error"
        if "body_size_limit" in message:
            self.metrics.error("body_too_large")
            self.deadlines.explain(flow.client_conn.id, f"request body is over the proxy's limit of "
                                   f"{ctx.options.body_size_limit} (proxy.max_body_mb)")
            return
        call: Call | None = flow.metadata.get("forge")
        if call is None or call.prep is None or call.recorded:
            return
        error = self.recorder.failed(flow, call, message, self.upstream_deadline.timeout_s)
        if error is None:
            return
        if flow.response is None:
            self.registry.mark_failed(call.upstream)
        if call.stream and call.transformer is not None:  # the client has a 200 stream: end it in error
            transport.end_stream(flow, call.transformer.fail(f"forge proxy: {error}"))
        else:
            self.deadlines.explain(flow.client_conn.id, error)

    # -- helpers -------------------------------------------------------------------------------------
    def _forward(self, flow: http.HTTPFlow, call: Call, upstream_path: str, record: bool = True) -> None:
        assert call.rollout is not None
        target = self.registry.pick(call.rollout)
        routing.point(flow, target, upstream_path, self.upstream_auth)
        if self.rollout_header:
            flow.request.headers["x-forge-rollout"] = call.rollout.rollout_id
        if not record:
            flow.metadata.pop("forge", None)
            return
        call.upstream = target.url
        call.version = self.registry.weight_version
        call.t_start = time.time()
        self.recorder.started(call)
        self.upstream_deadline.arm(flow, call)

    def _reject(self, flow: http.HTTPFlow, call: Call, status: int, kind: str, message: str) -> None:
        self.metrics.error(kind)
        flow.response = http.Response.make(status, guard.error_body(call.fmt, status, message, kind),
                                           {"content-type": "application/json"})

    def _resume(self) -> None:
        self._resumed.set()
        self._resumed = asyncio.Event()

    async def _control(self, flow: http.HTTPFlow) -> None:
        assert self.control is not None
        req = flow.request
        try:
            status, ctype, body = await self.control.handle(req.method, req.path, req.headers, req.content or b"")
        except Exception as exc:  # a control bug must not hang the client
            log.exception("control API failure")
            status, ctype, body = 500, "application/json", openai_error(500, repr(exc), "forge_control")
        flow.response = http.Response.make(status, body, {"content-type": ctype})
