"""forge's mitmproxy addon: serve ``/r/<rollout-id>/…`` model calls from the policy servers and record them.

Loaded by ``forge_cli.proxy.main`` (mitmproxy's proxy core in reverse mode, inside mitmproxy's own virtual
environment; ``launcher.py`` starts it). Hooks stay small:
routing, auth and token-capture rewriting happen on the event loop, record assembly and SQLite writes
in a separate writer process (``forge_cli.traces.writer``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Any

from mitmproxy import ctx, exceptions, http
from mitmproxy.proxy.layers.http import _http1

from forge_cli.proxy import auth, guard, wire
from forge_cli.proxy.control import PREFIX as CONTROL_PREFIX
from forge_cli.proxy.control import Control
from forge_cli.proxy.metrics import Metrics
from forge_cli.proxy.sink import RecordSink
from forge_cli.proxy.state import Registry, Rollout, call_seed
from forge_cli.proxy.wire import FORMATS
from forge_cli.proxy.wire.base import BadRequest, ClientStream, Limits, Prepared, openai_error

log = logging.getLogger("forge.proxy")
# request headers worth keeping in a record (session ids split sub-sessions inside a rollout)
KEEP_HEADERS = frozenset({"user-agent", "traceparent", "session-id", "x-session-id", "x-claude-code-session-id",
                          "anthropic-version", "anthropic-beta", "openai-beta", "x-stainless-lang",
                          "x-goog-api-client"})
_KEEP_HEADERS_B = frozenset(h.encode() for h in KEEP_HEADERS)
_REPLACED_HEADERS = frozenset(h.encode() for h in (*auth.CREDENTIAL_HEADERS, "host", "accept-encoding"))
CLIENT_GONE = ("Client disconnected", "Connection killed", "killed")


_error_body = guard.error_body


def _mitm_error_response(status_code: int, message: str = "") -> bytes:
    """Replaces mitmproxy's HTML error page (upstream down, timeout, body too large, bad HTTP) with JSON in every
    client's error shape at once (no flow here to tell the format)."""
    body = guard.error_body(None, status_code, message, "api_error")
    resp = http.Response.make(status_code, body, {"content-type": "application/json", "connection": "close"})
    return _http1.http1.assemble_response(resp)


class Call:
    """Per-flow state of one model call (``flow.metadata["forge"]``)."""

    __slots__ = (
        "chunks",
        "fmt",
        "headers",
        "path",
        "prep",
        "recorded",
        "reject",
        "request",
        "rollout",
        "seq",
        "stream",
        "t_first_byte",
        "t_last",
        "t_start",
        "timed_out",
        "timer",
        "transformer",
        "upstream",
        "version",
    )

    def __init__(self, rollout: Rollout | None, fmt: str, path: str) -> None:
        self.rollout = rollout
        self.fmt = fmt
        self.path = path
        self.reject: tuple[int, str, str] | None = None
        self.prep: Prepared | None = None
        self.request = b""
        self.headers: dict[str, str] = {}
        self.seq = -1
        self.upstream = ""
        self.version = ""
        self.stream = False
        self.transformer: ClientStream | None = None
        self.chunks: list[bytes] = []
        self.t_start = 0.0
        self.t_first_byte: float | None = None
        self.t_last = 0.0  # last upstream bytes of a stream (its idle timeout)
        self.timer: asyncio.TimerHandle | None = None
        self.timed_out = False
        self.recorded = False


class ForgeProxy:
    """The addon. Options are declared in ``load`` and validated in ``configure``."""

    def __init__(self) -> None:
        self.registry = Registry([])
        self.metrics = Metrics()
        self.sink: RecordSink | None = None
        self.control: Control | None = None
        self.limits = Limits()
        self.waiting: list[http.HTTPFlow] = []
        self.max_header_bytes = 65536
        self.deadlines = guard.ClientDeadlines()
        self._probe: asyncio.Task[None] | None = None
        self._watch: asyncio.Task[None] | None = None

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

    def configure(self, updated: set[str]) -> None:
        opts = ctx.options
        if "forge_upstreams" in updated:
            urls = [u for u in opts.forge_upstreams.split(",") if u.strip()]
            if not urls:
                raise exceptions.OptionsError("forge_upstreams: at least one policy server URL is required")
            self.registry = Registry(urls)
        if updated & {"forge_max_output_tokens", "forge_model", "forge_sampling"}:
            if opts.forge_max_output_tokens < 0:
                raise exceptions.OptionsError("forge_max_output_tokens must be >= 0")
            try:
                sampling = json.loads(opts.forge_sampling) if opts.forge_sampling else {}
            except json.JSONDecodeError as exc:
                raise exceptions.OptionsError(f"forge_sampling is not JSON: {exc}") from None
            if not isinstance(sampling, dict):
                raise exceptions.OptionsError("forge_sampling must be a JSON object")
            self.limits = Limits(max_output_tokens=opts.forge_max_output_tokens, model=opts.forge_model,
                                 sampling=sampling)
        if "forge_max_header_kb" in updated:
            if opts.forge_max_header_kb <= 0:
                raise exceptions.OptionsError("forge_max_header_kb must be > 0")
            self.max_header_bytes = opts.forge_max_header_kb * 1024
        if "forge_upstream_timeout" in updated and opts.forge_upstream_timeout <= 0:
            raise exceptions.OptionsError("forge_upstream_timeout must be > 0")
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
            if self.sink is None:
                self.sink = RecordSink(opts.forge_store)
            self.control = Control(self.registry, self.sink, self.metrics, opts.forge_store,
                                   auth.digest(token_file.read_text().strip()), self._resume_all)
        if self.control is not None:
            self.control.registry = self.registry
        # JSON errors instead of mitmproxy's HTML page for errors mitmproxy itself answers
        _http1.make_error_response = _mitm_error_response

    def running(self) -> None:
        self._probe = asyncio.get_running_loop().create_task(self._probe_upstreams())
        self._watch = asyncio.get_running_loop().create_task(self.deadlines.watch())

    def done(self) -> None:
        for task in (self._probe, self._watch):
            if task is not None:
                task.cancel()
        if self.sink is not None:
            self.sink.close()

    # -- hooks ---------------------------------------------------------------------------------------
    def client_connected(self, client: Any) -> None:
        proxyserver = ctx.master.addons.get("proxyserver")
        self.deadlines.connected(client.id, proxyserver.connections.get(client.id) if proxyserver else None)

    def client_disconnected(self, client: Any) -> None:
        self.deadlines.disconnected(client.id)

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        """Route and authenticate before the body is read; rejections are answered in ``request``."""
        path = flow.request.path
        self.deadlines.headers(flow.client_conn.id, wire.format_for_path(path.partition("/r/")[2] or path))
        if path.startswith(CONTROL_PREFIX):
            flow.metadata["forge_control"] = True
            return
        if not path.startswith("/r/"):
            call = Call(None, wire.format_for_path(path), path)
            call.reject = (404, "unknown_route", f"no such route {path.split('?')[0]!r}; use /r/<rollout-id>/v1/…")
            flow.metadata["forge"] = call
            return
        rid, _, rest = path[3:].partition("/")
        rest, query_key = auth.pop_query_key("/" + rest)  # Gemini API clients may send ?key= instead of a header
        rollout = self.registry.rollouts.get(rid)
        call = Call(rollout, wire.format_for_path(rest), rest)
        flow.metadata["forge"] = call
        size = sum(len(k) + len(v) + 4 for k, v in flow.request.headers.fields)
        if size > self.max_header_bytes:
            call.reject = (431, "header_too_large", f"request headers are {size} bytes (limit {self.max_header_bytes})")
        elif rollout is None or rollout.finished is not None:
            call.reject = (401, "unauthorized", f"unknown or finished rollout {rid!r}")
        elif not auth.matches(auth.presented_key(flow.request.headers) or query_key, rollout.key_digest):
            call.reject = (401, "unauthorized", "missing or wrong API key for this rollout")

    def request(self, flow: http.HTTPFlow) -> None:
        self.deadlines.read(flow.client_conn.id)
        if flow.metadata.get("forge_control"):
            self._control(flow)
            return
        call: Call | None = flow.metadata.get("forge")
        if call is None:
            return
        if call.reject is not None:
            self._reject(flow, call, *call.reject)
            return
        req = flow.request
        target = wire.route(call.path)
        if target is None:
            if req.method == "GET" and call.path.split("?")[0].rstrip("/") in ("/v1/models", "/models"):
                self._forward(flow, call, "/v1/models", record=False)
                return
            self._reject(flow, call, 404, "unknown_route", f"no model API at {req.method} {call.path}")
            return
        if req.method != "POST":
            self._reject(flow, call, 405, "bad_method", f"{req.method} not allowed; model calls are POST")
            return
        if "json" not in req.headers.get("content-type", "").lower():
            self._reject(flow, call, 415, "content_type", "content-type must be application/json")
            return
        call.fmt, upstream_path = target.name, target.upstream_path
        body = req.raw_content or b""
        if req.headers.get("content-encoding"):
            try:
                body = req.content or b""
            except ValueError:
                self._reject(flow, call, 400, "bad_request", "request body does not decode as its content-encoding "
                             f"{req.headers['content-encoding']!r} says")
                return
            req.headers.pop("content-encoding")
        limits = self.limits
        if call.rollout is not None and (call.rollout.sampling or "seed" in limits.sampling):
            # the rollout's own sampling over the proxy's; a seed becomes this call's own (call_seed)
            sampling = {**limits.sampling, **call.rollout.sampling}
            if "seed" in sampling:
                sampling["seed"] = call_seed(int(sampling["seed"]), call.rollout, call.rollout.next_seq)
            limits = dataclasses.replace(limits, sampling=sampling)
        try:
            call.prep = target.prepare(body, limits, call.path)
        except BadRequest as exc:
            self._reject(flow, call, exc.status, "bad_request", exc.message)
            return
        except Exception as exc:  # wrong types deep inside (a string where parts go, nesting past recursion): 400
            log.debug("request rejected", exc_info=True)
            self._reject(flow, call, 400, "bad_request", f"request does not have the shape of a {call.fmt} request: "
                         f"{type(exc).__name__}: {str(exc)[:200]}")
            return
        call.request = body
        call.headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in req.headers.fields
                        if k.lower() in _KEEP_HEADERS_B}
        assert call.rollout is not None
        call.seq = call.rollout.next_seq
        call.rollout.next_seq += 1
        req.content = call.prep.body
        if self.registry.paused:
            flow.intercept()
            self.waiting.append(flow)
            flow.metadata["forge_path"] = upstream_path
            return
        self._forward(flow, call, upstream_path)

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        call: Call | None = flow.metadata.get("forge")
        if call is None or call.prep is None or flow.response is None:
            return
        call.t_first_byte = call.t_last = time.time()  # the timer now waits for the body (a stream: each chunk)
        resp = flow.response
        if resp.status_code == 200 and "text/event-stream" in resp.headers.get("content-type", ""):
            call.stream = True
            call.transformer = FORMATS[call.fmt].client_stream(call.prep)
            if "content-length" in resp.headers:
                del resp.headers["content-length"]
                resp.headers["transfer-encoding"] = "chunked"
            resp.stream = self._streamer(call)

    def response(self, flow: http.HTTPFlow) -> None:
        self.deadlines.answered(flow.client_conn.id)
        call: Call | None = flow.metadata.get("forge")
        if call is None or call.prep is None or flow.response is None or call.recorded:
            return
        if call.timer is not None:
            call.timer.cancel()
        resp = flow.response
        if call.stream:
            self._record(call, "incomplete", "stream ended before its terminal event", resp.status_code)
            return
        try:
            raw = resp.content or b""
        except ValueError:  # an encoding that does not decode: judged as the bytes it is
            raw = resp.raw_content or b""
        if resp.status_code < 400:
            problem = guard.answer_problem(resp.status_code, resp.headers.get("content-type", ""), raw)
            if problem is None:
                try:
                    resp.content = FORMATS[call.fmt].client_body(raw, call.prep)
                except Exception as exc:  # a chat completion with wrong types inside: not translatable
                    problem = f"upstream answer is not a valid chat completion: {type(exc).__name__}: {exc}"[:300]
            if problem is None:
                self._record(call, "ok", None, resp.status_code, raw)
                return
            client = _error_body(call.fmt, 502, problem, "bad_gateway")
            flow.response = http.Response.make(502, client, {"content-type": "application/json"})
            self.metrics.error("upstream_bad_answer")
            self._record(call, "upstream_error", problem, 502, raw, client_response=client)
        else:
            client = raw
            # another format's shape, HTML, FastAPI's {"detail": ...}: reshaped
            if FORMATS[call.fmt].reshapes_errors or not guard.openai_shaped(raw):
                client = _error_body(call.fmt, resp.status_code, guard.upstream_message(raw), "upstream_error")
                resp.content = client
                resp.headers["content-type"] = "application/json"
            self.metrics.error("upstream_4xx" if resp.status_code < 500 else "upstream_5xx")
            message = f"upstream answered {resp.status_code}: {guard.upstream_message(raw)}"
            self._record(call, "upstream_error", message, resp.status_code, raw, client_response=client)

    def error(self, flow: http.HTTPFlow) -> None:
        """Connection-level failures; for streams this can arrive instead of ``response`` (Codex closes early)."""
        self.deadlines.answered(flow.client_conn.id)
        message = flow.error.msg if flow.error else "unknown error"
        call: Call | None = flow.metadata.get("forge")
        if "body_size_limit" in message:
            self.metrics.error("body_too_large")
            return
        if call is None or call.prep is None or call.recorded:
            return
        if call.timer is not None:
            call.timer.cancel()
        client_gone = any(m in message for m in CLIENT_GONE) and not call.timed_out
        if call.stream and call.transformer is not None and call.transformer.done:
            self._record(call, "ok", None, 200)
        elif client_gone:
            self.metrics.error("client_abort")
            self._record(call, "client_abort", message, flow.response.status_code if flow.response else None)
        else:
            if flow.response is None:
                self.registry.mark_failed(call.upstream)
            kind = "upstream_timeout" if call.timed_out else "upstream_error"
            self.metrics.error(kind)
            error = f"upstream timed out after {ctx.options.forge_upstream_timeout:g}s" if call.timed_out else message
            if call.stream and call.transformer is not None:  # the client has a 200 stream: end it in error
                self._record(call, "upstream_error", error, 200)
                handler = self._handler(flow)
                guard.end_stream(handler.transports.get(flow.client_conn) if handler else None, flow.response,
                                 call.transformer.fail(f"forge proxy: {error}"))
            else:  # nothing sent to the client yet: mitmproxy answers 502
                self._record(call, "upstream_error", error, 502)

    # -- helpers -------------------------------------------------------------------------------------
    def _forward(self, flow: http.HTTPFlow, call: Call, upstream_path: str, record: bool = True) -> None:
        assert call.rollout is not None
        upstream = self.registry.pick(call.rollout)
        req = flow.request
        req.scheme, req.host, req.port = upstream.scheme, upstream.host, upstream.port
        req.path = upstream.prefix + upstream_path
        # one pass over the header fields: credentials, encoding and host replaced
        fields = tuple(f for f in req.headers.fields if f[0].lower() not in _REPLACED_HEADERS)
        req.headers.fields = (*fields, (b"host", upstream.hostport), (b"accept-encoding", b"identity"))
        if not record:
            flow.metadata.pop("forge", None)
            return
        call.upstream = upstream.url
        call.version = self.registry.weight_version
        call.t_start = time.time()
        self.metrics.in_flight += 1
        self.metrics.bytes_in += len(call.request)
        call.timer = asyncio.get_running_loop().call_later(ctx.options.forge_upstream_timeout, self._timeout, flow)

    def _streamer(self, call: Call) -> Any:
        def record(status: str, error: str | None) -> None:
            if status != "ok":
                self.metrics.error("upstream_bad_stream")
            self._record(call, status, error, 200)

        return guard.streamer(call, record)

    @staticmethod
    def _handler(flow: http.HTTPFlow) -> Any:
        """mitmproxy's handler of the flow's client connection (its transports), if still there."""
        proxyserver = ctx.master.addons.get("proxyserver")
        return proxyserver.connections.get(flow.client_conn.id) if proxyserver else None

    def _record(self, call: Call, status: str, error: str | None, http_status: int | None,
                raw: bytes | None = None, client_response: bytes | None = None) -> None:
        if call.recorded or self.sink is None or call.rollout is None or call.prep is None:
            return
        call.recorded = True
        now = time.time()
        self.metrics.in_flight -= 1
        body = raw if raw is not None else b"".join(call.chunks)
        self.metrics.bytes_out += len(body)
        self.metrics.calls[(call.fmt, status)] += 1
        self.metrics.records_sent += 1
        self.metrics.observe(now - call.t_start)
        call.rollout.calls += 1
        if status != "ok":
            call.rollout.failed += 1
        meta = {
            "type": "call", "rollout_id": call.rollout.rollout_id, "seq": call.seq, "wire_format": call.fmt,
            "path": call.path, "model": call.prep.model, "stream": call.stream, "status": status, "error": error,
            "http_status": http_status, "upstream": call.upstream, "weight_version": call.version,
            "headers": call.headers, "t_start": call.t_start, "t_first_byte": call.t_first_byte, "t_end": now,
            "wants_token_ids": call.prep.wants_token_ids, "wants_logprobs": call.prep.wants_logprobs,
        }
        blobs = {"request": call.request, "response": body}
        if call.prep.rewritten:  # translated or changed beyond the capture fields
            blobs["upstream_request"] = call.prep.body
        if client_response is not None:
            blobs["client_response"] = client_response
        self.sink.send(meta, blobs)

    def _reject(self, flow: http.HTTPFlow, call: Call, status: int, kind: str, message: str) -> None:
        self.metrics.error(kind)
        flow.response = http.Response.make(status, _error_body(call.fmt, status, message, kind),
                                           {"content-type": "application/json"})

    def _timeout(self, flow: http.HTTPFlow) -> None:
        """No response headers, no whole JSON body or no stream chunk in time: close the upstream connection;
        mitmproxy then answers 502 (JSON), or ``error`` ends the client's stream with an error event."""
        call: Call | None = flow.metadata.get("forge")
        if call is None or call.recorded:
            return
        limit = ctx.options.forge_upstream_timeout
        waited = time.time() - (call.t_last or call.t_start)
        if call.t_last and waited < limit:  # a stream's chunk or the headers came since: wait on from there
            call.timer = asyncio.get_running_loop().call_later(limit - waited, self._timeout, flow)
            return
        call.timed_out = True
        handler = self._handler(flow)
        io = handler.transports.get(flow.server_conn) if handler else None
        if io is not None and io.writer is not None:
            io.writer.close()
        else:
            flow.kill()

    def _resume_all(self) -> None:
        waiting, self.waiting = self.waiting, []
        for flow in waiting:
            call: Call | None = flow.metadata.get("forge")
            if call is not None and flow.live:
                self._forward(flow, call, flow.metadata.pop("forge_path"))
            flow.resume()

    def _control(self, flow: http.HTTPFlow) -> None:
        assert self.control is not None
        req = flow.request
        flow.intercept()

        async def answer() -> None:
            try:
                status, ctype, body = await self.control.handle(req.method, req.path, req.headers,  # type: ignore[union-attr]
                                                                req.content or b"")
            except Exception as exc:  # a control bug must not hang the client
                log.exception("control API failure")
                status, ctype, body = 500, "application/json", openai_error(500, repr(exc), "forge_control")
            flow.response = http.Response.make(status, body, {"content-type": ctype})
            flow.resume()

        asyncio.get_running_loop().create_task(answer())

    async def _probe_upstreams(self) -> None:
        """Every 2 s, try a TCP connect to each unhealthy upstream; mark it healthy when it answers."""
        while True:
            await asyncio.sleep(2.0)
            for upstream in self.registry.upstreams:
                if upstream.healthy:
                    continue
                with contextlib.suppress(OSError, TimeoutError):
                    _, writer = await asyncio.wait_for(asyncio.open_connection(upstream.host, upstream.port), 2.0)
                    writer.close()
                    upstream.healthy = True
