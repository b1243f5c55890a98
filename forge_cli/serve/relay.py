"""What forge's small OpenAI-compatible servers share (the replay upstream, the teacher stand-in, the tool relay):
a quiet stdlib request handler that answers JSON, streams Server-Sent Events, and passes a request through to a
policy server with its answer streamed back as it arrives; and the server itself, on loopback in a thread."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterable
from typing import Any, Self

import httpx

# request headers a pass-through keeps (credentials of the upstream's own included; nothing forge adds)
PASSED_HEADERS = ("content-type", "authorization", "accept")


class JSONHandler(http.server.BaseHTTPRequestHandler):
    """A request handler with no access log (nothing of a key can leak there), ``send_json``, ``send_events`` and
    ``pass_through``."""

    def log_message(self, format: str, *args: Any) -> None:
        return

    def read_body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_events(self, events: Iterable[bytes]) -> None:
        """A 200 event stream of ``events`` (each a whole ``data: ...\\n\\n``), then the connection closes."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        for event in events:
            self.wfile.write(event)
        self.close_connection = True

    def pass_through(self, client: httpx.Client, upstream: str, body: bytes | None) -> None:
        """The request, as it came (``body``), to ``upstream`` + its path; the answer streamed back as it arrives
        (a 502 in OpenAI's shape when the upstream does not answer at all)."""
        headers = {k: v for k, v in self.headers.items() if k.lower() in PASSED_HEADERS}
        sent = False
        try:
            with client.stream(self.command, upstream + self.path, content=body, headers=headers) as answer:
                sent = True
                self.send_response(answer.status_code)
                self.send_header("Content-Type", answer.headers.get("content-type", "application/json"))
                self.send_header("Connection", "close")
                self.end_headers()
                for chunk in answer.iter_raw():
                    self.wfile.write(chunk)
                    self.wfile.flush()
        except httpx.HTTPError as exc:
            if not sent:  # else the answer is cut off: the client sees a broken stream
                self.send_json(502, {"error": {"message": f"the upstream did not answer: {exc}",
                                               "type": "bad_gateway", "param": None, "code": 502}})
        self.close_connection = True


class LocalServer:
    """A threaded HTTP server on 127.0.0.1 (``port`` 0: a free one) serving ``handler`` from a daemon thread while
    in its ``with`` block; ``url`` is its base URL. Subclasses release their own resources in ``close``."""

    def __init__(self, handler: type[http.server.BaseHTTPRequestHandler], port: int = 0, name: str = "") -> None:
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True, name=name or None)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.close()

    def close(self) -> None:
        """What the subclass holds beside the server (an HTTP client): released after it stops."""
