"""Recording: each model call's answer judged, translated back to the client's wire format and recorded once.

``Recorder`` turns what the upstream answered (a JSON body, a stream, an error status, a failed connection) into
the client's answer and one record for the store writer (``RecordSink``: frames through a pipe to
``forge_cli.remote.mitmproxy.writer``, which assembles the ``CallRecord`` in its own process).
"""

from __future__ import annotations

import time

from mitmproxy import http

from forge_cli.proxy import guard
from forge_cli.proxy.metrics import Metrics
from forge_cli.proxy.routing import Call
from forge_cli.proxy.sink import RecordSink
from forge_cli.proxy.wire import FORMATS

CLIENT_GONE = ("Client disconnected", "Connection killed", "killed")


class Recorder:
    """Judges answers and records calls (``sink`` is set once the store is configured)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self.sink: RecordSink | None = None

    def started(self, call: Call) -> None:
        """The call went upstream."""
        self.metrics.in_flight += 1
        self.metrics.bytes_in += len(call.request)

    def stream(self, flow: http.HTTPFlow, call: Call) -> None:
        """Response headers of a 200 event stream: chunks go through the format's ``ClientStream`` from now on."""
        resp = flow.response
        assert resp is not None and call.prep is not None
        call.stream = True
        call.transformer = FORMATS[call.fmt].client_stream(call.prep)
        if "content-length" in resp.headers:
            del resp.headers["content-length"]
            resp.headers["transfer-encoding"] = "chunked"

        def record(status: str, error: str | None) -> None:
            if status != "ok":
                self.metrics.error("upstream_bad_stream")
            self.record(call, status, error, 200)

        resp.stream = guard.streamer(call, record)

    def answered(self, flow: http.HTTPFlow, call: Call) -> None:
        """A whole answer (``response``): translated for the client, or replaced by an error in its shape."""
        resp = flow.response
        assert resp is not None
        if call.stream:
            self.record(call, "incomplete", "stream ended before its terminal event", resp.status_code)
            return
        try:
            raw = resp.content or b""
        except ValueError:  # an encoding that does not decode: judged as the bytes it is
            raw = resp.raw_content or b""
        if resp.status_code < 400:
            problem = guard.answer_problem(resp.status_code, resp.headers.get("content-type", ""), raw)
            if problem is None:
                try:
                    resp.content = FORMATS[call.fmt].client_body(raw, call.prep)  # type: ignore[arg-type]
                except Exception as exc:  # a chat completion with wrong types inside: not translatable
                    problem = f"upstream answer is not a valid chat completion: {type(exc).__name__}: {exc}"[:300]
            if problem is None:
                self.record(call, "ok", None, resp.status_code, raw)
                return
            client = guard.error_body(call.fmt, 502, problem, "bad_gateway")
            flow.response = http.Response.make(502, client, {"content-type": "application/json"})
            self.metrics.error("upstream_bad_answer")
            self.record(call, "upstream_error", problem, 502, raw, client_response=client)
            return
        client = raw
        # another format's shape, HTML, FastAPI's {"detail": ...}: reshaped
        if FORMATS[call.fmt].reshapes_errors or not guard.openai_shaped(raw):
            client = guard.error_body(call.fmt, resp.status_code, guard.upstream_message(raw), "upstream_error")
            resp.content = client
            resp.headers["content-type"] = "application/json"
        self.metrics.error("upstream_4xx" if resp.status_code < 500 else "upstream_5xx")
        message = f"upstream answered {resp.status_code}: {guard.upstream_message(raw)}"
        self.record(call, "upstream_error", message, resp.status_code, raw, client_response=client)

    def failed(self, flow: http.HTTPFlow, call: Call, message: str, timeout_s: float) -> str | None:
        """The flow's connection failed (``error``): recorded; the client's error message when the upstream
        failed it (None when the stream had ended or the client left)."""
        client_gone = any(m in message for m in CLIENT_GONE) and not call.timed_out
        if call.stream and call.transformer is not None and call.transformer.done:
            self.record(call, "ok", None, 200)
            return None
        if client_gone:
            self.metrics.error("client_abort")
            self.record(call, "client_abort", message, flow.response.status_code if flow.response else None)
            return None
        kind = "upstream_timeout" if call.timed_out else "upstream_error"
        self.metrics.error(kind)
        error = f"upstream timed out after {timeout_s:g}s" if call.timed_out else message
        # a stream already answered 200 (it ends in an error event); otherwise mitmproxy answers 502
        self.record(call, "upstream_error", error, 200 if call.stream else 502)
        return error

    def record(self, call: Call, status: str, error: str | None, http_status: int | None,
               raw: bytes | None = None, client_response: bytes | None = None) -> None:
        """Hand the call's one record to the store writer (a second call is ignored)."""
        if call.recorded or self.sink is None or call.rollout is None or call.prep is None:
            return
        call.recorded = True
        if call.timer is not None:
            call.timer.cancel()
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
