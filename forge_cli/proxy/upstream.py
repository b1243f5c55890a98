"""The policy servers' side: their health, and each call's deadline on them.

* ``probe`` (a task while the proxy runs): every 2 s, a TCP connect to each upstream marked failed; it is healthy
  again when it answers. ``Registry.pick`` sends rollouts to healthy upstreams only.
* ``Deadline``: a call must get its response headers, then the rest of a JSON answer, then each next stream chunk
  within ``timeout_s``; an overdue one has its upstream connection closed (``transport.close_upstream``) and is
  recorded as a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from mitmproxy import http

from forge_cli.proxy import transport
from forge_cli.proxy.routing import Call
from forge_cli.proxy.state import Registry, Upstream

PROBE_EVERY_S = 2.0
CONNECT_TIMEOUT_S = 2.0


async def _connects(upstream: Upstream) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(upstream.host, upstream.port), CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError):
        return False
    writer.close()
    return True


async def probe(registry: Registry) -> None:
    """Mark failed upstreams healthy again once they accept connections (runs until cancelled)."""
    while True:
        await asyncio.sleep(PROBE_EVERY_S)
        for upstream in registry.upstreams:
            if not upstream.healthy and await _connects(upstream):
                upstream.healthy = True


class Deadline:
    """Per-call upstream deadlines on the event loop's timers."""

    def __init__(self, timeout_s: float = 900.0) -> None:
        self.timeout_s = timeout_s

    def arm(self, flow: http.HTTPFlow, call: Call) -> None:
        call.timer = asyncio.get_running_loop().call_later(self.timeout_s, self._check, flow)

    def _check(self, flow: http.HTTPFlow) -> None:
        call: Call | None = flow.metadata.get("forge")
        if call is None or call.recorded:
            return
        waited = time.time() - (call.t_last or call.t_start)
        if call.t_last and waited < self.timeout_s:  # a stream's chunk or the headers came since: wait on
            call.timer = asyncio.get_running_loop().call_later(self.timeout_s - waited, self._check, flow)
            return
        call.timed_out = True
        with contextlib.suppress(Exception):
            transport.close_upstream(flow)
