"""docker backend (Docker SDK for Python): one container per rollout.

The container is created from :func:`container_kwargs` (labels ``forge.run``/``forge.rollout``,
CPU/memory/pids limits, ``cap_drop=ALL``, no-new-privileges, host networking by default, the harness
bundle bind-mounted read-only, nothing else from the host) and idles until its deadline. Commands reach
it through forge's in-container runner (``runner.py``: named pipes in a read-only bind mount, no ``runc exec``
per command) when the daemon is local, else through ``docker exec``. Files move as tar archives through the
daemon. ``cleanup`` removes containers by label. forge never pulls: images come from ``scripts/base-image.sh``
or ``forge image build``.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import shlex
import socket
import tarfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from forge_cli.config.schema import DockerRuntime
from forge_cli.runtime import runner
from forge_cli.runtime.base import (
    SandboxConfigError,
    SandboxError,
    SandboxGone,
    SandboxUnavailable,
    blocking,
)
from forge_cli.runtime.container import ContainerSandbox, ContainerState, Emit
from forge_cli.runtime.docker_spec import WORKDIR_MODE, container_kwargs
from forge_cli.runtime.spec import LABEL_RUN, label_value

DAEMON_FIX = "start dockerd: scripts/dockerd.sh (or scripts/setup.sh docker), or set runtime.docker_host"
_clients: dict[str | None, Any] = {}
_clients_lock = threading.Lock()


def client_for(runtime: DockerRuntime) -> Any:
    """One shared DockerClient per daemon address (its connection pool sized for many concurrent execs)."""
    import docker

    with _clients_lock:
        client = _clients.get(runtime.docker_host)
        if client is None:
            try:
                if runtime.docker_host:
                    client = docker.DockerClient(base_url=runtime.docker_host, max_pool_size=256, timeout=120)
                else:
                    client = docker.from_env(max_pool_size=256, timeout=120)
                client.ping()
            except Exception as error:
                where = runtime.docker_host or "the local socket (DOCKER_HOST)"
                raise SandboxUnavailable(f"cannot reach dockerd at {where}: {_short(error)}", DAEMON_FIX) from error
            _clients[runtime.docker_host] = client
        return client


def _local_daemon(runtime: DockerRuntime) -> bool:
    """Does dockerd share this machine's filesystem (a unix socket), so that a host directory can be bind-mounted?"""
    address = runtime.docker_host or os.environ.get("DOCKER_HOST") or "unix://"
    return address.startswith("unix://")


def _short(error: BaseException) -> str:
    text = getattr(error, "explanation", None) or str(error)
    return str(text).splitlines()[0][:300] if text else type(error).__name__


@contextlib.contextmanager
def docker_errors(what: str) -> Iterator[None]:
    """Map Docker SDK and connection errors to SandboxErrors with one clear message."""
    import docker.errors
    import requests.exceptions

    try:
        yield
    except SandboxError:
        raise
    except docker.errors.ImageNotFound as error:
        raise SandboxConfigError(f"{what}: {_short(error)}",
                                 "build the image first (scripts/base-image.sh, forge image build); "
                                 "forge never pulls from a registry") from error
    except docker.errors.NotFound as error:
        raise SandboxGone(f"{what}: the container is gone ({_short(error)})") from error
    except docker.errors.APIError as error:
        text = _short(error)
        if error.status_code == 409 and "is not running" in text:
            raise SandboxGone(f"{what}: the container is not running ({text})") from error
        if error.status_code == 409 and "already in use" in text:
            raise SandboxConfigError(f"{what}: {text}",
                                     "a sandbox of the same rollout is left over: forge sandbox cleanup RUN") from error
        if error.status_code is not None and 400 <= error.status_code < 500:
            raise SandboxConfigError(f"{what}: docker refused it: {text}") from error
        raise SandboxError(f"{what}: dockerd failed: {text}", DAEMON_FIX) from error
    except (requests.exceptions.ConnectionError, docker.errors.DockerException, ConnectionError) as error:
        raise SandboxUnavailable(f"{what}: lost the connection to dockerd ({_short(error)})", DAEMON_FIX) from error


class DockerSandbox(ContainerSandbox):
    kind = "docker"

    def __init__(self, spec: Any, runtime: DockerRuntime, log_dir: Path | None = None) -> None:
        super().__init__(spec, runtime, log_dir)
        self.container_id: str | None = None
        self.channel: runner.Channel | None = None

    @classmethod
    def default_runtime(cls) -> DockerRuntime:
        return DockerRuntime(kind="docker", description="docker sandboxes")

    @classmethod
    def describe(cls, spec: Any, argv: Sequence[str], runtime: Any) -> dict[str, Any]:
        from forge_cli.runtime.docker_spec import docker_run_command

        # the container already holds the env; exec inherits it
        return {"kind": "docker", "docker_run": docker_run_command(spec, getattr(runtime, "layout", "docker"),
                                                                   getattr(runtime, "user", None)),
                "exec": f"docker exec -i -w {spec.workdir} {spec.name} {shlex.join(argv)} </dev/null"}

    @property
    def api(self) -> Any:
        return client_for(self.runtime).api

    # ------------------------------------------------------------------ lifecycle
    async def _start(self) -> None:
        await blocking(self._start_blocking)

    def _start_blocking(self) -> None:
        kwargs = container_kwargs(self.spec, self.runtime.layout, self.runtime.user)
        kwargs.pop("detach", None)
        if self.spec.bundle_host_path and not Path(self.spec.bundle_host_path).is_dir():
            raise SandboxConfigError(f"harness bundle {self.spec.bundle_host_path} does not exist",
                                     "install it first: forge harness install NAME")
        from docker.models.containers import _create_container_args

        api = client_for(self.runtime).api
        if self.runtime.layout != "pod" and _local_daemon(self.runtime):
            self.channel = runner.Channel()
            kwargs["command"] = runner.main_command(kwargs["command"])
            kwargs["volumes"] = {**kwargs.get("volumes", {}), str(self.channel.dir): {"bind": runner.MOUNT,
                                                                                        "mode": "ro"}}
        with docker_errors(f"creating sandbox {self.spec.name} from image '{self.spec.image}'"):
            # the low-level calls: the high-level create() inspects the new container once more
            args = _create_container_args({**kwargs, "version": api._version})
            self.container_id = api.create_container(**args)["Id"]
            api.start(self.container_id)
            if self.runtime.user is not None:
                exec_id = api.exec_create(self.container_id, ["chmod", WORKDIR_MODE, self.spec.workdir], user="0")["Id"]
                output = api.exec_start(exec_id)
                if api.exec_inspect(exec_id)["ExitCode"] != 0:
                    raise SandboxConfigError(f"sandbox {self.spec.name}: the workdir {self.spec.workdir} cannot be "
                                             f"made writable for user {self.runtime.user}: "
                                             f"{output.decode(errors='replace').strip()}",
                                             "use an image whose workdir root owns, or leave runtime.user unset")

    async def _stop(self) -> None:
        if self.container_id is not None:
            await blocking(self._stop_blocking)
        elif self.channel is not None:  # the container was never created
            self.channel.close()

    def _stop_blocking(self) -> None:
        import docker.errors

        try:
            with docker_errors(f"removing sandbox {self.spec.name}"):
                try:
                    if self.log_dir is not None:
                        self._save_logs()
                    self.api.remove_container(self.container_id, force=True, v=True)
                except docker.errors.NotFound:
                    return
        finally:
            if self.channel is not None:
                self.channel.close()

    def _save_logs(self) -> None:
        assert self.log_dir is not None
        logs = self.api.logs(self.container_id, stdout=True, stderr=True)
        (self.log_dir / "container.log").write_bytes(logs)
        state = self.api.inspect_container(self.container_id)["State"]
        (self.log_dir / "container-state.json").write_text(json.dumps(state, indent=2))

    @classmethod
    async def _cleanup(cls, run_id: str | None, runtime: Any) -> list[str]:
        return await blocking(cls._cleanup_blocking, run_id, runtime)

    @classmethod
    def _cleanup_blocking(cls, run_id: str | None, runtime: DockerRuntime) -> list[str]:
        import docker.errors

        api = client_for(runtime).api
        label = f"{LABEL_RUN}={label_value(run_id)}" if run_id else LABEL_RUN
        removed = []
        with docker_errors("cleaning up sandboxes"):
            for info in api.containers(all=True, filters={"label": label}):
                with contextlib.suppress(docker.errors.NotFound):
                    api.remove_container(info["Id"], force=True, v=True)
                removed.append(info["Names"][0].lstrip("/") if info.get("Names") else info["Id"][:12])
        return removed

    # ------------------------------------------------------------------ exec
    def _run_blocking(self, argv: list[str], emit: Emit, stdin: bytes | None = None) -> int | None:
        channel = self.channel
        if channel is not None and channel.usable is not False and stdin is None:
            script = argv[2] if len(argv) == 3 and argv[:2] == ["/bin/sh", "-c"] else "exec " + shlex.join(argv)
            code = channel.run(script, emit, lambda: self._container_state().running)  # type: ignore[arg-type]
            if code is not False:
                return code
        what = f"running a command in sandbox {self.spec.name}"
        with docker_errors(what):
            exec_id = self.api.exec_create(self.container_id, argv, stdout=True, stderr=True,
                                           stdin=stdin is not None)["Id"]
            for stream, chunk in self._exec_frames(exec_id, stdin):
                emit("stderr" if stream == 2 else "stdout", chunk)
            code = self.api.exec_inspect(exec_id)["ExitCode"]
            return code if isinstance(code, int) else None

    def _exec_frames(self, exec_id: str, stdin: bytes | None = None) -> Iterator[tuple[int, bytes]]:
        """The multiplexed output frames (stream 1 stdout, 2 stderr) of a started exec (``stdin``: sent first, then
        the write side closed, as ``docker exec -i`` does).

        Read from the response's *buffered* reader: the SDK reads the raw socket underneath it, and loses
        frames that arrived in the same read as the response headers (seen under load: a fast command's
        whole output missing, exit code 0).
        """
        from docker.utils.socket import frames_iter

        api = self.api
        response = api._post_json(api._url("/exec/{0}/start", exec_id), headers={"Connection": "Upgrade",
                                  "Upgrade": "tcp"}, data={"Tty": False, "Detach": False}, stream=True)
        try:
            api._raise_for_status(response)
            if stdin is not None:
                sock = api._get_raw_response_socket(response)
                raw = getattr(sock, "_sock", sock)
                raw.sendall(stdin)
                raw.shutdown(socket.SHUT_WR)
            reader = getattr(getattr(response.raw, "_fp", None), "fp", None)
            if reader is None or not hasattr(reader, "raw"):  # transports without a buffered reader (ssh, npipe)
                yield from frames_iter(api._get_raw_response_socket(response), tty=False)
                return
            api._disable_socket_timeout(reader.raw)  # a command may be silent for longer than the API timeout
            while len(header := reader.read(8)) == 8:
                size = int.from_bytes(header[4:8], "big")
                payload = reader.read(size)
                if payload:
                    yield header[0], payload
                if len(payload) < size:
                    break
        finally:
            response.close()

    def _container_state(self) -> ContainerState:
        import docker.errors

        with docker_errors(f"inspecting sandbox {self.spec.name}"):
            try:
                state: dict[str, Any] = self.api.inspect_container(self.container_id)["State"]
            except docker.errors.NotFound:
                return ContainerState(running=False, detail="the container was removed")
        return ContainerState(running=bool(state.get("Running")), oom_killed=bool(state.get("OOMKilled")),
                              detail=f"{state.get('Status')}, exit code {state.get('ExitCode')}")

    # ------------------------------------------------------------------ what the harness changed (seen from outside)
    async def system_changes(self) -> dict[str, int]:
        """Every path changed in the container's filesystem since its image (``docker diff``: 0 modified, 1 added,
        2 deleted), as dockerd records it: nothing inside the container can hide a change from it."""
        def diff() -> dict[str, int]:
            with docker_errors(f"listing the changes of sandbox {self.spec.name}"):
                return {str(c["Path"]): int(c["Kind"]) for c in self.api.diff(self.container_id) or []}

        return await blocking(diff)

    async def path_mode(self, path: str) -> int | None:
        """The mode of ``path`` in the container as dockerd reports it (Go's bits; None: it does not exist)."""
        def stat() -> int | None:
            api = self.api
            with docker_errors(f"inspecting {path} in sandbox {self.spec.name}"):
                response = api.head(api._url("/containers/{0}/archive", self.container_id), params={"path": path},
                                    timeout=api.timeout)
                if response.status_code == 404:
                    return None
                api._raise_for_status(response)
            encoded = response.headers.get("x-docker-container-path-stat")
            return int(json.loads(base64.b64decode(encoded)).get("mode", 0)) if encoded else None

        return await blocking(stat)

    # ------------------------------------------------------------------ files
    async def _write_file(self, path: str, data: bytes) -> None:
        if self.runtime.user is not None:  # owned by the sandbox's user, as a pod's files are
            await self._exec_write_file(path, data)
            return
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8") as tar:
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(data))

        def put() -> None:
            with docker_errors(f"writing {path} in sandbox {self.spec.name}"):
                if not self.api.put_archive(self.container_id, "/", buffer.getvalue()):
                    raise SandboxError(f"docker refused to write {path} in sandbox {self.spec.name}")

        await blocking(put)

    async def _read_file(self, path: str) -> bytes:
        return await blocking(self._read_blocking, path)

    def _read_blocking(self, path: str) -> bytes:
        import docker.errors

        with docker_errors(f"reading {path} in sandbox {self.spec.name}"):
            try:
                stream, stat = self.api.get_archive(self.container_id, path)
            except docker.errors.NotFound as error:
                raise FileNotFoundError(path) from error
            if stat.get("mode", 0) & (1 << 31):  # Go's os.ModeDir
                raise IsADirectoryError(path)
            archive = b"".join(stream)
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r", encoding="utf-8") as tar:
            for member in tar:
                if member.isfile():
                    extracted = tar.extractfile(member)
                    assert extracted is not None
                    return extracted.read()
        raise FileNotFoundError(f"{path} is not a regular file")
