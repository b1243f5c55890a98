"""Shared test helpers: run the real ``forge`` CLI in a subprocess; small HTTP servers on loopback."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def forge(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``python -m forge_cli ARGS`` as a user would, capturing output."""
    return subprocess.run(
        [sys.executable, "-m", "forge_cli", *args],
        capture_output=True, text=True, timeout=timeout, cwd=REPO,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )


# forge's example task file in the flat format (the old builtin tasks, and mail-reply with its mailbox tools)
EXAMPLE_TASKS = str(Path(__file__).resolve().parent.parent / "forge_cli" / "envs" / "examples" / "tasks.yaml")


class QuietHandler(http.server.BaseHTTPRequestHandler):
    """A test server's request handler that logs nothing, with :meth:`reply`."""

    def reply(self, status: int, data: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def serve_http(handler: type[http.server.BaseHTTPRequestHandler]) -> tuple[http.server.ThreadingHTTPServer, str]:
    """A threaded HTTP server on a free loopback port (shut it down with ``.shutdown()``) and its base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def benchmark_module(name: str) -> Any:
    """``benchmarks/NAME.py`` imported as module ``NAME`` (benchmarks are scripts, not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
