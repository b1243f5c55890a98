"""Shared test helpers: run the real ``forge`` CLI in a subprocess; small HTTP servers on loopback."""

from __future__ import annotations

import contextlib
import http.server
import importlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
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


def forge_json(sandboxes: Path, *args: str, timeout: float = 900) -> dict[str, Any]:
    """``forge ARGS --json`` that must succeed (local sandboxes under ``sandboxes``): its JSON summary."""
    import json

    result = forge(*args, "--json", env={"FORGE_SANDBOX_DIR": str(sandboxes)}, timeout=timeout)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(json.loads(result.stdout[result.stdout.index("{"):]))


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


@contextlib.contextmanager
def temporary_package(root: Path, name: str) -> Iterator[Path]:
    """An importable package ``name`` (an empty ``__init__.py``) under ``root``, on ``sys.path`` while in use; its
    modules are forgotten afterwards (a plugin a test defines in a package of its own)."""
    package = root / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    sys.path.insert(0, str(root))
    try:
        yield package
    finally:
        sys.path.remove(str(root))
        for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[module]


def install_module(package: Path, module: str, source: str) -> None:
    """Write ``source`` as ``module`` of ``package`` and import it (a plugin registers itself when imported)."""
    (package / f"{module}.py").write_text(source)
    importlib.invalidate_caches()
    importlib.import_module(f"{package.name}.{module}")


@contextlib.contextmanager
def fake_upstream() -> Iterator[str]:
    """``tests/proxy/fake_upstream.py`` (a vLLM-shaped stand-in) on a free loopback port; yields its URL."""
    from forge_cli.ports import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve().parent / "proxy" / "fake_upstream.py"),
                             str(port)])
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()
