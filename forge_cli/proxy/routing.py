"""Routing and admission of model calls: ``/r/<rollout-id>/<wire path>`` → the rollout, its wire format, the
upstream request.

* ``admit`` (``requestheaders``): the rollout and format of a call, or why it is refused (unknown route, rollout or
  key, headers over the limit), decided before the body is read. A body over mitmproxy's ``body_size_limit`` is
  refused by mitmproxy itself (413, in the call's shape: ``transport.ClientWriter``).
* ``prepare`` (``request``): the whole request checked and rewritten for the upstream by its ``WireFormat``
  (sampling and limits enforced), or why it is refused.
* ``point``: the flow sent to one upstream (credentials, encoding and host replaced).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from mitmproxy import http

from forge_cli.proxy import auth, wire
from forge_cli.proxy.state import Registry, Rollout, Upstream, call_seed
from forge_cli.proxy.wire.base import BadRequest, ClientStream, Limits, Prepared

log = logging.getLogger("forge.proxy")
# request headers worth keeping in a record (session ids split sub-sessions inside a rollout)
KEEP_HEADERS = frozenset({"user-agent", "traceparent", "session-id", "x-session-id", "x-claude-code-session-id",
                          "anthropic-version", "anthropic-beta", "openai-beta", "x-stainless-lang",
                          "x-goog-api-client"})
_KEEP_HEADERS_B = frozenset(h.encode() for h in KEEP_HEADERS)
# replaced on the way upstream; a client's own x-forge-rollout never reaches it (the addon sets it when asked to)
_REPLACED_HEADERS = frozenset(h.encode() for h in (*auth.CREDENTIAL_HEADERS, "host", "accept-encoding",
                                                   "x-forge-rollout"))
Rejection = tuple[int, str, str]  # status, error kind, message


class Call:
    """Per-flow state of one model call (``flow.metadata["forge"]``)."""

    __slots__ = ("chunks", "fmt", "headers", "path", "prep", "recorded", "reject", "request", "rollout", "seq",
                 "stream", "t_first_byte", "t_last", "t_start", "timed_out", "timer", "transformer", "upstream",
                 "upstream_path", "version")

    def __init__(self, rollout: Rollout | None, fmt: str, path: str) -> None:
        self.rollout = rollout
        self.fmt = fmt
        self.path = path
        self.reject: Rejection | None = None
        self.prep: Prepared | None = None
        self.request = b""
        self.headers: dict[str, str] = {}
        self.seq = -1
        self.upstream = ""
        self.upstream_path = ""
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


def admit(flow: http.HTTPFlow, registry: Registry, max_header_bytes: int) -> Call:
    """The call a model-API flow is (its ``reject`` set when it is refused), from its headers alone."""
    path = flow.request.path
    if not path.startswith("/r/"):
        call = Call(None, wire.format_for_path(path), path)
        call.reject = (404, "unknown_route", f"no such route {path.split('?')[0]!r}; use /r/<rollout-id>/v1/…")
        return call
    rid, _, rest = path[3:].partition("/")
    rest, query_key = auth.pop_query_key("/" + rest)  # Gemini API clients may send ?key= instead of a header
    rollout = registry.rollouts.get(rid)
    call = Call(rollout, wire.format_for_path(rest), rest)
    headers = flow.request.headers
    size = sum(len(k) + len(v) + 4 for k, v in headers.fields)
    if size > max_header_bytes:
        call.reject = (431, "header_too_large", f"request headers are {size} bytes (limit {max_header_bytes})")
    elif rollout is None or rollout.finished is not None:
        call.reject = (401, "unauthorized", f"unknown or finished rollout {rid!r}")
    elif not auth.matches(auth.presented_key(headers) or query_key, rollout.key_digest):
        call.reject = (401, "unauthorized", "missing or wrong API key for this rollout")
    return call


def prepare(flow: http.HTTPFlow, call: Call, limits: Limits) -> Rejection | None:
    """Check the whole request and rewrite it for the upstream (``call.prep``, ``call.upstream_path``, the flow's
    body); a rejection when it cannot be served."""
    req = flow.request
    target = wire.route(call.path)
    if target is None:
        return 404, "unknown_route", f"no model API at {req.method} {call.path}"
    if req.method != "POST":
        return 405, "bad_method", f"{req.method} not allowed; model calls are POST"
    if "json" not in req.headers.get("content-type", "").lower():
        return 415, "content_type", "content-type must be application/json"
    call.fmt, call.upstream_path = target.name, target.upstream_path
    body = req.raw_content or b""
    if req.headers.get("content-encoding"):
        try:
            body = req.content or b""
        except ValueError:
            return 400, "bad_request", ("request body does not decode as its content-encoding "
                                        f"{req.headers['content-encoding']!r} says")
        req.headers.pop("content-encoding")
    rollout = call.rollout
    assert rollout is not None
    if rollout.sampling or "seed" in limits.sampling:
        # the rollout's own sampling over the proxy's; a seed becomes this call's own (call_seed)
        sampling = {**limits.sampling, **rollout.sampling}
        if "seed" in sampling:
            sampling["seed"] = call_seed(int(sampling["seed"]), rollout, rollout.next_seq)
        limits = dataclasses.replace(limits, sampling=sampling)
    try:
        call.prep = target.prepare(body, limits, call.path)
    except BadRequest as exc:
        return exc.status, "bad_request", exc.message
    except Exception as exc:  # wrong types deep inside (a string where parts go, nesting past recursion): 400
        log.debug("request rejected", exc_info=True)
        return 400, "bad_request", (f"request does not have the shape of a {call.fmt} request: "
                                    f"{type(exc).__name__}: {str(exc)[:200]}")
    call.request = body
    call.headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in req.headers.fields
                    if k.lower() in _KEEP_HEADERS_B}
    call.seq = rollout.next_seq
    rollout.next_seq += 1
    req.content = call.prep.body
    return None


def is_models_listing(flow: http.HTTPFlow, call: Call) -> bool:
    """``GET …/v1/models`` (SDKs list models before calling): forwarded, not recorded."""
    return flow.request.method == "GET" and call.path.split("?")[0].rstrip("/") in ("/v1/models", "/models")


def point(flow: http.HTTPFlow, upstream: Upstream, upstream_path: str, authorization: bytes | None = None) -> None:
    """Send the flow to ``upstream``: one pass over the header fields replaces credentials (the client's rollout key
    never leaves; ``authorization``, the upstream's own, goes instead), encoding and host."""
    req = flow.request
    req.scheme, req.host, req.port = upstream.scheme, upstream.host, upstream.port
    req.path = upstream.prefix + upstream_path
    fields = tuple(f for f in req.headers.fields if f[0].lower() not in _REPLACED_HEADERS)
    auth_field = ((b"authorization", authorization),) if authorization else ()
    req.headers.fields = (*fields, *auth_field, (b"host", upstream.hostport), (b"accept-encoding", b"identity"))
