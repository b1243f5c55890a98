"""One rollout's desktop: a ``forge-desktop`` container in a network namespace of its own, reached through relays.

Why this shape: OSWorld's tasks use fixed ports inside the machine (5000 for its server, 1337/9222 for Chromium's
DevTools, 8080 for VLC). Under the host networking forge's sandboxes use, two desktops would collide on them. So each
desktop container runs with ``--network none`` (its own namespace, loopback only: it cannot reach anything, and
nothing can reach it over TCP) and the image's ``start.sh`` relays unix sockets in a directory bind-mounted from the
host (``/relay/<port>.sock``) to those ports. On the host, forge listens on three free loopback ports per desktop and
forwards each connection to the matching socket: OSWorld's host code (setup, evaluators) and forge's computer-use
tools talk to ``127.0.0.1:<port>`` as they would to a VM.

Nothing outlives forge: the container runs with ``--rm --init`` and its ``start.sh`` ends when the *lifeline*
closes, a unix-socket connection forge opens right after the start and holds for the desktop's life. When forge
exits, however it exits (SIGKILL included), the kernel closes it and the container removes itself; a container
whose lifeline never connected ends after ``FORGE_DESKTOP_CONNECT_S`` (120 s). Every container carries the label
``forge.desktop`` (the rollout) and ``forge.run`` (the run), so ``docker ps --filter label=forge.desktop`` finds them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forge_cli.runtime.spec import LABEL_RUN, label_value

LABEL_DESKTOP = "forge.desktop"
DEFAULT_IMAGE = "forge-desktop:bookworm"
BUILD_COMMAND = "forge image build --builtin desktop"
# the ports inside the desktop that forge relays: OSWorld's server, Chromium's DevTools (socat 9222 -> 1337 in the
# tasks' own setup), VLC's web interface
GUEST_PORTS = (5000, 9222, 8080)
START_TIMEOUT_S = 120.0
# the container ends when its lifeline has not connected within this many seconds
CONNECT_S = 120
_RELAY_CHUNK = 1 << 16


class DesktopError(Exception):
    """The desktop could not be started or stopped working: an infra error of the rollout."""


class DesktopImageMissing(DesktopError):
    """The image is not on the daemon (the fix: the build command)."""


_client: Any = None
_client_lock = threading.Lock()


def docker_client() -> Any:
    """The local daemon (DOCKER_HOST), one client shared by every desktop: the relay directory is bind-mounted, so
    the daemon must be on this machine."""
    global _client
    import docker

    with _client_lock:
        if _client is None:
            try:
                client = docker.from_env(timeout=120, max_pool_size=64)
                client.ping()
            except Exception as exc:
                raise DesktopError(f"cannot reach dockerd: {exc}; start it with scripts/dockerd.sh") from None
            _client = client
        return _client


def has_image(image: str) -> bool:
    import docker.errors

    try:
        docker_client().api.inspect_image(image)
    except docker.errors.ImageNotFound:
        return False
    return True


@dataclass
class Relay:
    """``127.0.0.1:<port>`` on the host, each connection forwarded to a unix socket (the desktop's side)."""

    socket_path: Path
    server: asyncio.Server | None = None
    port: int = 0
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(str(self.socket_path))
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer), return_exceptions=True)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 2)
            self.server = None


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(_RELAY_CHUNK):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            if writer.can_write_eof():
                writer.write_eof()
        with contextlib.suppress(Exception):
            writer.close()


@dataclass
class DesktopContainer:
    """A started desktop: its container, relay directory, lifeline and host ports."""

    name: str
    container_id: str
    directory: Path
    lifeline: socket.socket
    relays: dict[int, Relay]

    @property
    def server_url(self) -> str:
        return f"http://127.0.0.1:{self.relays[5000].port}"

    def port(self, guest: int) -> int:
        return self.relays[guest].port

    @classmethod
    async def start(cls, image: str, rollout_id: str, run_id: str | None, log_dir: Path | None,
                    screen: tuple[int, int] = (1920, 1080), memory: str | None = "4g",
                    timeout_s: float = START_TIMEOUT_S) -> DesktopContainer:
        """Start the container, connect its lifeline, wait for its server; DesktopError when any step fails."""
        parent = Path(tempfile.mkdtemp(prefix="forge-desktop-"))  # 0700: only root reaches the sockets
        directory = parent / "relay"
        directory.mkdir()
        directory.chmod(0o777)  # the desktop's user (uid 1000) creates its sockets here
        name = f"forge-desktop-{label_value(rollout_id)[:40]}-{os.urandom(3).hex()}"
        try:
            container_id = await asyncio.to_thread(_run_container, image, name, directory, rollout_id, run_id,
                                                   screen, memory)
        except BaseException:
            shutil.rmtree(parent, ignore_errors=True)
            raise
        desktop = cls(name, container_id, directory, socket.socket(socket.AF_UNIX), {})
        try:
            await desktop._connect(timeout_s)
        except BaseException:
            await desktop.stop(log_dir)
            raise
        return desktop

    async def _connect(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        lifeline = self.directory / "lifeline.sock"
        while True:
            try:
                self.lifeline.connect(str(lifeline))
                break
            except OSError:
                await self._check_running()
                if time.monotonic() > deadline:
                    raise DesktopError(f"desktop {self.name} did not start within {timeout_s:.0f}s") from None
                await asyncio.sleep(0.2)
        for guest in GUEST_PORTS:
            relay = Relay(self.directory / f"{guest}.sock")
            await relay.start()
            self.relays[guest] = relay
        while not (self.directory / "ready").exists():
            await self._check_running()
            if time.monotonic() > deadline:
                raise DesktopError(f"the server of desktop {self.name} did not answer within {timeout_s:.0f}s")
            await asyncio.sleep(0.2)

    async def _check_running(self) -> None:
        state = await asyncio.to_thread(_container_state, self.container_id)
        if state is not None:
            raise DesktopError(f"desktop {self.name} stopped while starting ({state})")

    async def stop(self, log_dir: Path | None = None) -> None:
        """Keep the container's log, remove it, close the relays and the lifeline, delete the relay directory."""
        for relay in self.relays.values():
            await relay.close()
        await asyncio.to_thread(_remove_container, self.container_id, log_dir)
        with contextlib.suppress(OSError):
            self.lifeline.close()
        shutil.rmtree(self.directory.parent, ignore_errors=True)


def _run_container(image: str, name: str, directory: Path, rollout_id: str, run_id: str | None,
                   screen: tuple[int, int], memory: str | None) -> str:
    import docker.errors

    client = docker_client()
    labels = {LABEL_DESKTOP: label_value(rollout_id)}
    if run_id:
        labels[LABEL_RUN] = label_value(run_id)
    try:
        container = client.containers.run(
            image, detach=True, name=name, init=True, auto_remove=True, network_mode="none", labels=labels,
            volumes={str(directory): {"bind": "/relay", "mode": "rw"}}, shm_size="1g", mem_limit=memory,
            environment={"SCREEN_WIDTH": str(screen[0]), "SCREEN_HEIGHT": str(screen[1]),
                         "FORGE_DESKTOP_CONNECT_S": str(CONNECT_S)})
    except docker.errors.ImageNotFound:
        raise DesktopImageMissing(f"the desktop image {image} is not built; build it with: {BUILD_COMMAND}") from None
    except docker.errors.APIError as exc:
        raise DesktopError(f"the desktop container did not start: {exc.explanation or exc}") from None
    return str(container.id)


def _container_state(container_id: str) -> str | None:
    """None while the container runs, else what happened to it."""
    import docker.errors

    try:
        state = docker_client().api.inspect_container(container_id)["State"]
    except docker.errors.NotFound:
        return "removed"
    if state.get("Running"):
        return None
    return f"{state.get('Status')}, exit code {state.get('ExitCode')}"


def _remove_container(container_id: str, log_dir: Path | None) -> None:
    import docker.errors

    api = docker_client().api
    if log_dir is not None:
        with contextlib.suppress(docker.errors.APIError, OSError):
            log_dir.mkdir(parents=True, exist_ok=True)
            (log_dir / "desktop.log").write_bytes(api.logs(container_id, stdout=True, stderr=True))
    with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
        api.remove_container(container_id, force=True, v=True)


def remove_desktops(run_id: str | None = None) -> list[str]:
    """Remove every desktop container (of one run); the names removed."""
    import docker.errors

    api = docker_client().api
    label = f"{LABEL_RUN}={label_value(run_id)}" if run_id else LABEL_DESKTOP
    removed = []
    for info in api.containers(all=True, filters={"label": [LABEL_DESKTOP, label]}):
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            api.remove_container(info["Id"], force=True, v=True)
        removed.append((info.get("Names") or [info["Id"][:12]])[0].lstrip("/"))
    return removed
