"""The setups ``benchmarks/proxy.py`` compares, its load client and CPU accounting.

Each setup is a server in front of (or, for ``direct``, being) the fake vLLM: ``Plain`` for the ones that store
nothing (direct, bare mitmdump, forge's core without its addon), ``Forge`` for forge's capture proxy and ``Rllm``
for rLLM's model gateway (PyPI ``rllm-model-gateway``, run from its own virtual environment, which
``rllm_gateway()`` creates on first use). ``cell()`` gives the path and key of one measured run (forge: a new
rollout, rLLM: a new session); ``settle()`` waits until the setup's store holds every call it answered and checks
the records.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from forge_cli.paths import forge_home  # noqa: E402
from forge_cli.proxy.launcher import ProxyHandle, free_port, mitmdump_path, start_proxy  # noqa: E402
from tests.proxy.conftest import _wait_port  # noqa: E402

RLLM_PACKAGE = "rllm-model-gateway==0.1.0"  # the only release on PyPI (checked with pip index versions)
CHAT = "/v1/chat/completions"


def cpu_s(pid: int) -> float:
    """User+system CPU seconds of a process (all its threads) so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


# -- the load client: one asyncio process, raw HTTP/1.1 keep-alive connections ---------------------------------


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    lower = head.lower()
    if b"content-length:" in lower:
        length = int(lower.split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
        await reader.readexactly(length)
    else:
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    return status


async def _worker(port: int, path: str, key: str, body: bytes, n: int, lat: list[float], bad: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    head = (f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
            f"authorization: Bearer {key}\r\ncontent-length: {len(body)}\r\n\r\n").encode()
    request = head + body
    for _ in range(n):
        start = time.perf_counter()
        writer.write(request)
        status = await _read_response(reader)
        lat.append(time.perf_counter() - start)
        if status != 200:
            bad.append(status)
    writer.close()


async def load(port: int, path: str, key: str, body: bytes, conns: int, total: int) -> dict[str, Any]:
    """``total`` requests over ``conns`` connections at once: throughput and latency percentiles."""
    lat: list[float] = []
    bad: list[int] = []
    per = [total // conns + (1 if i < total % conns else 0) for i in range(conns)]
    start = time.perf_counter()
    await asyncio.gather(*(_worker(port, path, key, body, n, lat, bad) for n in per if n))
    wall = time.perf_counter() - start
    lat.sort()

    def pct(p: float) -> float:
        return lat[min(len(lat) - 1, int(p * len(lat)))] * 1000

    return {"conns": conns, "requests": len(lat), "errors": len(bad), "wall_s": wall, "rps": len(lat) / wall,
            "p50_ms": pct(0.5), "p90_ms": pct(0.9), "p99_ms": pct(0.99), "mean_ms": statistics.fmean(lat) * 1000}


async def spread(targets: list[tuple[int, str, str]], body: bytes, conns: int, total: int) -> list[dict[str, Any]]:
    """The connections and requests split evenly over ``targets``, all at once."""
    share = max(1, conns // len(targets))
    return list(await asyncio.gather(*[load(port, path, key, body, share, total // len(targets))
                                       for port, path, key in targets]))


# -- the setups ------------------------------------------------------------------------------------------------


class Plain:
    """A server that stores nothing: ``direct`` (the fake vLLM itself), bare ``mitmdump``, forge's ``core``."""

    stores = False

    def __init__(self, name: str, port: int, proc: subprocess.Popen[bytes] | None, pid: int) -> None:
        self.name, self.port, self.proc, self.pids = name, port, proc, [pid]
        self.writer_pids: list[int] = []

    def cell(self) -> tuple[str, str]:
        return CHAT, "x"

    def settle(self, cell: tuple[str, str], answered: int, expect: tuple[int, int]) -> dict[str, Any]:
        return {}

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(20)


class Forge(Plain):
    """forge's capture proxy (``start_proxy``): one rollout per measured run; its store writer is a child process."""

    stores = True

    def __init__(self, handle: ProxyHandle) -> None:
        super().__init__("forge", int(handle.url.rsplit(":", 1)[1]), None, handle.process.pid)
        self.handle = handle
        self.writer_pids = children(handle.process.pid)
        self.rollouts: dict[str, str] = {}

    def cell(self) -> tuple[str, str]:
        rollout = self.handle.register(task="benchmark")
        path = f"/r/{rollout['rollout_id']}{CHAT}"
        self.rollouts[path] = rollout["rollout_id"]
        return path, rollout["key"]

    def settle(self, cell: tuple[str, str], answered: int, expect: tuple[int, int]) -> dict[str, Any]:
        """Finish the rollout (forge answers once all its records are committed) and check them."""
        rollout = self.rollouts.pop(cell[0])
        start = time.perf_counter()
        self.handle.finish(rollout)
        drain = time.perf_counter() - start
        with contextlib.closing(sqlite3.connect(self.handle.store, timeout=60)) as conn:
            stored, exact = conn.execute(
                "SELECT COUNT(*), TOTAL(json_array_length(prompt_token_ids) = ? AND prompt_tokens = ? AND "
                "json_array_length(completion_token_ids) = ? AND json_array_length(completion_logprobs) = ?) "
                "FROM calls WHERE rollout_id = ? AND status = 'ok'", (expect[0], expect[0], expect[1], expect[1],
                                                                      rollout)).fetchone()
        return {"answered": answered, "stored": stored, "stored_token_exact": int(exact), "drain_s": drain}

    def stop(self) -> None:
        self.handle.stop()


class Rllm(Plain):
    """rLLM's model gateway as its README starts it (``rllm-model-gateway --worker URL/v1``), its own SQLite store.

    Its sessions are implicit (``/sessions/<id>/v1/...``); it injects ``logprobs`` and ``return_token_ids``,
    strips them from the answer, and writes each trace in an asyncio task after answering; on SIGTERM it drains the
    pending writes (uvicorn's lifespan shutdown)."""

    stores = True

    def __init__(self, exe: Path, upstream: str, db: Path, log: Path) -> None:
        port = free_port()
        self.db = db
        self.log = log
        # --log-level warning: no per-request access log (mitmdump and forge run at "warn" too)
        proc = subprocess.Popen([str(exe), "--host", "127.0.0.1", "--port", str(port), "--db-path", str(db),
                                 "--worker", f"{upstream}/v1", "--log-level", "warning"],
                                stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
        super().__init__("rllm", port, proc, proc.pid)
        try:
            _wait_port(port, timeout=60)
        except Exception:
            proc.kill()
            raise RuntimeError(f"rLLM's gateway did not start:\n{log.read_text()[-3000:]}") from None

    def cell(self) -> tuple[str, str]:
        return f"/sessions/{uuid.uuid4().hex}{CHAT}", "EMPTY"

    def _counts(self, session: str, expect: tuple[int, int] | None) -> tuple[int, int]:
        with contextlib.closing(sqlite3.connect(self.db, timeout=60)) as conn:
            if expect is None:
                row = conn.execute("SELECT COUNT(*), 0 FROM trace_sessions WHERE session_id = ?", (session,))
            else:
                row = conn.execute(
                    "SELECT COUNT(*), TOTAL(json_array_length(t.data, '$.prompt_token_ids') = ? AND "
                    "json_array_length(t.data, '$.completion_token_ids') = ? AND "
                    "json_array_length(t.data, '$.logprobs') = ?) FROM trace_sessions s JOIN traces t "
                    "ON t.trace_id = s.trace_id WHERE s.session_id = ?", (*expect, expect[1], session))
            count, exact = row.fetchone()
        return int(count), int(exact)

    def settle(self, cell: tuple[str, str], answered: int, expect: tuple[int, int]) -> dict[str, Any]:
        """Poll its store until the session holds every answered call (or 60 s pass with no new one)."""
        session = cell[0].split("/")[2]
        start = last_change = time.perf_counter()
        seen = -1
        while True:
            stored = self._counts(session, None)[0]
            now = time.perf_counter()
            if stored != seen:
                seen, last_change = stored, now
            if stored >= answered or now - last_change > 60:
                break
            time.sleep(0.02)
        drain = time.perf_counter() - start
        stored, exact = self._counts(session, expect)
        return {"answered": answered, "stored": stored, "stored_token_exact": exact, "drain_s": drain}

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)  # uvicorn's graceful shutdown drains the pending trace writes
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def rllm_gateway(env: Path | None = None) -> tuple[Path, dict[str, str]]:
    """rLLM's gateway executable in its own virtual environment (created once), and the versions installed there.

    Never a dependency of forge: ``$FORGE_HOME/envs/rllm-gateway`` holds ``RLLM_PACKAGE`` and what it requires."""
    env = env or forge_home() / "envs" / "rllm-gateway"
    exe, stamp = env / "bin" / "rllm-model-gateway", env / ".forge-stamp"
    if not (exe.exists() and stamp.exists() and stamp.read_text() == RLLM_PACKAGE):
        print(f"installing {RLLM_PACKAGE} into its own environment {env} (once)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(env)], check=True)
        done = subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "-q",
                               "--disable-pip-version-check", RLLM_PACKAGE], check=False)
        if done.returncode != 0:
            raise SystemExit(f"could not install {RLLM_PACKAGE} (PyPI unreachable?); leave rLLM out with "
                             f"--setups direct,mitmdump,core,forge")
        stamp.write_text(RLLM_PACKAGE)
    freeze = subprocess.run([str(env / "bin" / "python"), "-m", "pip", "freeze", "--disable-pip-version-check"],
                            capture_output=True, text=True, check=True).stdout.split()
    return exe, dict(line.split("==", 1) for line in freeze if "==" in line)


def start_upstream(max_model_len: int) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests/proxy/fake_upstream.py"), str(port),
                             str(max_model_len)])
    _wait_port(port)
    return proc, port


def start_setups(names: list[str], up: tuple[subprocess.Popen[bytes], int], tmp: Path,
                 rllm_exe: Path | None) -> dict[str, Plain]:
    """The servers of ``names`` in front of the fake vLLM at ``up``, each with its store in ``tmp``."""
    proc, up_port = up
    upstream = f"http://127.0.0.1:{up_port}"
    setups: dict[str, Plain] = {}
    try:
        for name in names:
            if name == "direct":
                setups[name] = Plain(name, up_port, None, proc.pid)
            elif name in ("mitmdump", "core"):
                port = free_port()
                mode = ["--mode", f"reverse:{upstream}@127.0.0.1:{port}", "--set", "connection_strategy=lazy"]
                cmd = [str(mitmdump_path()), *mode, "--set", "flow_detail=0"] if name == "mitmdump" else \
                    [str(mitmdump_path().with_name("python")), "-m", "forge_cli.remote.mitmproxy.main", "--core-only",
                     *mode]
                child = subprocess.Popen([*cmd, "--set", "termlog_verbosity=warn"], cwd=ROOT,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         env={**os.environ, "PYTHONPATH": str(ROOT)})
                setups[name] = Plain(name, port, child, child.pid)
                _wait_port(port)
            elif name == "forge":
                setups[name] = Forge(start_proxy(upstream, store=tmp / "forge.sqlite", max_output_tokens=0))
            elif name == "rllm":
                assert rllm_exe is not None
                setups[name] = Rllm(rllm_exe, upstream, tmp / "rllm.sqlite", tmp / "rllm.log")
            else:
                raise ValueError(f"unknown setup {name!r}")
    except BaseException:
        stop_all(setups)
        raise
    return setups


def stop_all(setups: dict[str, Plain]) -> None:
    for setup in setups.values():
        with contextlib.suppress(Exception):
            setup.stop()
