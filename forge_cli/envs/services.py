"""Env services (``env.services``): processes an env needs beside the harness, started by forge on the host.

A service is started per rollout (``scope: rollout``: its own process, port and state directory, so rollouts never
share state) or once per run (``scope: run``), health-checked before the harness starts (HTTP ``health_path``
answering below 500, or the TCP port accepting), and stopped after the rollout (or the run). Services bind
``host`` (loopback by default), which sandboxes with host networking reach and nothing off the machine does. Each
service's output goes to ``<log dir>/services/<name>.log``. Harness and verifier get their URLs as
``FORGE_SERVICE_<NAME>_URL``. A service that does not come up is an infra error of the rollout, with its log.
A ``scope: run`` service dies with forge (parent-death signal); per-rollout ones, started from worker threads where
that signal cannot be tied to forge's life, are stopped with their rollout and at the end of the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from forge_cli.config.schema import EnvService
from forge_cli.procs import die_with_parent


class ServiceError(Exception):
    """A service did not start or did not become healthy (an infra error of the rollout)."""


def url_env(urls: dict[str, str]) -> dict[str, str]:
    """``FORGE_SERVICE_<NAME>_URL`` variables for service URLs by name."""
    return {f"FORGE_SERVICE_{name.upper().replace('-', '_')}_URL": url for name, url in urls.items()}


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass
class RunningService:
    spec: EnvService
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=5)


def start_service(spec: EnvService, log_dir: Path, rollout_id: str = "") -> RunningService:
    """Start one service and wait until it is healthy (blocking)."""
    port = spec.port or _free_port(spec.host)
    state_dir = log_dir / "services" / f"{spec.name}-state"
    state_dir.mkdir(parents=True, exist_ok=True)
    values = {"port": str(port), "host": spec.host, "rollout_id": rollout_id, "state_dir": str(state_dir)}
    try:
        argv = [part.format(**values) for part in spec.command]
    except (KeyError, IndexError, ValueError) as exc:
        raise ServiceError(f"service {spec.name}: bad placeholder in its command ({exc}); "
                           "use {port}, {host}, {rollout_id}, {state_dir}") from None
    log_path = log_dir / "services" / f"{spec.name}.log"
    env = {**os.environ, **spec.env, "PORT": str(port), "HOST": spec.host}
    with log_path.open("ab") as log:
        try:
            process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env=env, cwd=state_dir, start_new_session=True,
                                       preexec_fn=die_with_parent(signal.SIGKILL))
        except OSError as exc:
            raise ServiceError(f"service {spec.name}: cannot run {argv[0]}: {exc.strerror}") from None
    service = RunningService(spec, f"http://{spec.host}:{port}", process, log_path)
    try:
        _wait_healthy(service, port)
    except ServiceError:
        service.stop()
        raise
    return service


def _wait_healthy(service: RunningService, port: int) -> None:
    import httpx

    spec = service.spec
    deadline = time.monotonic() + spec.ready_timeout_s
    while time.monotonic() < deadline:
        if service.process.poll() is not None:
            tail = service.log_path.read_text(errors="replace")[-1500:]
            raise ServiceError(f"service {spec.name} exited with code {service.process.returncode} before it was "
                               f"ready; its log ({service.log_path}) ends:\n{tail}")
        try:
            if spec.health_path is None:
                with socket.create_connection((spec.host, port), timeout=1):
                    return
            elif httpx.get(service.url + spec.health_path, timeout=2).status_code < 500:
                return
        except (OSError, httpx.HTTPError):
            pass
        time.sleep(0.2)
    raise ServiceError(f"service {spec.name} was not healthy within {spec.ready_timeout_s}s "
                       f"(log: {service.log_path})")


class Services:
    """The services of one run: ``scope: run`` ones started with :meth:`start_run`, the others per rollout."""

    def __init__(self, specs: Sequence[EnvService]) -> None:
        self.specs = list(specs)
        self.shared: list[RunningService] = []
        self.per_rollout: dict[str, list[RunningService]] = {}

    def start_run(self, run_dir: Path) -> None:
        for spec in self.specs:
            if spec.scope == "run":
                self.shared.append(start_service(spec, run_dir))

    async def start_rollout(self, rollout_id: str, log_dir: Path) -> dict[str, str]:
        """Start the rollout's own services; their URLs by name, the run's shared ones included."""
        mine: list[RunningService] = []
        self.per_rollout[rollout_id] = mine
        for spec in self.specs:
            if spec.scope == "rollout":
                mine.append(await asyncio.to_thread(start_service, spec, log_dir, rollout_id))
        return {s.spec.name: s.url for s in [*self.shared, *mine]}

    async def stop_rollout(self, rollout_id: str) -> None:
        for service in self.per_rollout.pop(rollout_id, []):
            await asyncio.to_thread(service.stop)

    def stop(self) -> None:
        for services in [*self.per_rollout.values(), self.shared]:
            for service in services:
                with contextlib.suppress(Exception):
                    service.stop()
        self.per_rollout.clear()
        self.shared = []
