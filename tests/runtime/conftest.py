"""Fixtures for the sandbox conformance suite: one ``backend`` parameter per runtime.

- local always runs;
- docker runs against the real daemon (marker ``docker``); the session fixture starts dockerd with
  scripts/dockerd.sh when none answers and builds forge-base:bookworm with scripts/base-image.sh;
- kubernetes runs when ``KUBECONFIG`` points at a cluster (the part ``kubernetes`` of tests/requires.py), otherwise
  it is skipped with that reason.
  With kind, on a machine that has it::

      kind create cluster --name forge
      kind load docker-image forge-base:bookworm --name forge
      .venv/bin/forge k8s manifests | kubectl apply -f -     # namespace, service accounts, RBAC, proxy
      KUBECONFIG=$HOME/.kube/config .venv/bin/pytest tests/runtime -k kubernetes

  ``FORGE_TEST_NAMESPACE`` (default forge) and ``FORGE_TEST_IMAGE`` (default forge-base:bookworm)
  select where and from what. NetworkPolicies are enforced only by a CNI that implements them.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from forge_cli.config.schema import DockerRuntime, KubernetesRuntime, LocalRuntime, Resources
from forge_cli.runtime.base import Sandbox
from forge_cli.runtime.registry import backend as backend_class
from forge_cli.runtime.spec import LABEL_RUN, SandboxSpec, label_value
from tests.requires import requires

ROOT = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("FORGE_TEST_IMAGE", "forge-base:bookworm")
# the non-root user of the pod-layout sandboxes (runtime.user; the Kubernetes backend's run_as_user default)
POD_USER = "1000:1000"
T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def docker_answers() -> bool:
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0


@pytest.fixture(scope="session")
def docker_daemon() -> None:
    """A running dockerd and the base image (started/built here when missing)."""
    requires("docker")


BACKENDS = [
    pytest.param("local", id="local"),
    pytest.param("docker", id="docker", marks=pytest.mark.docker),
    # docker with a Kubernetes pod's process layout (sleep infinity as PID 1, commands through docker exec)
    pytest.param("docker-pod", id="docker-pod", marks=pytest.mark.docker),
    # the same as a non-root user, as a pod under the restricted Pod Security profile runs (runtime.user)
    pytest.param("docker-pod-user", id="docker-pod-user", marks=pytest.mark.docker),
    pytest.param("kubernetes", id="kubernetes", marks=pytest.mark.requires("kubernetes")),
]


def runtime_for(kind: str, **fields: Any) -> Any:
    if kind == "local":
        return LocalRuntime(kind="local", description="test", **fields)
    if kind == "docker":
        return DockerRuntime(kind="docker", description="test", **fields)
    if kind == "docker-pod":
        return DockerRuntime(kind="docker", description="test", layout="pod", **fields)
    if kind == "docker-pod-user":
        return DockerRuntime(kind="docker", description="test", layout="pod", user=POD_USER, **fields)
    return KubernetesRuntime(kind="kubernetes", description="test",
                             namespace=os.environ.get("FORGE_TEST_NAMESPACE", "forge"),
                             image_pull_policy="IfNotPresent", **fields)


@pytest.fixture(params=BACKENDS)
def kind(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    if name.startswith("docker"):
        request.getfixturevalue("docker_daemon")
    return name


class Factory:
    """Makes specs and sandboxes for one test; every sandbox of the test shares one run id."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.run_id = f"test-{uuid.uuid4().hex[:10]}"
        self.cls: type[Sandbox] = backend_class("docker" if kind.startswith("docker") else kind)
        self.runtime = runtime_for(kind)
        self.count = 0

    def spec(self, **fields: Any) -> SandboxSpec:
        self.count += 1
        values: dict[str, Any] = {"run_id": self.run_id, "rollout_id": f"{self.run_id}-r{self.count}", "image": IMAGE,
                                  "workdir": "/work", "timeout_s": 120, "resources": Resources(memory="512m")}
        values.update(fields)
        return SandboxSpec(**values)

    async def create(self, **fields: Any) -> Sandbox:
        return await self.cls.create(self.spec(**fields), self.runtime)

    def leftovers(self) -> list[str]:
        return leftovers(self.kind, self.run_id, self.runtime)


def leftovers(kind: str, run_id: str, runtime: Any) -> list[str]:
    """What a run still has on the backend, found by label (docker, kubernetes) or directory (local)."""
    if kind.startswith("docker"):
        import docker

        client = docker.from_env()
        found = client.api.containers(all=True, filters={"label": f"{LABEL_RUN}={label_value(run_id)}"})
        return [c["Names"][0] for c in found]
    if kind == "local":
        from forge_cli.runtime.local import sandboxes_root

        run_dir = sandboxes_root() / label_value(run_id)
        names = [p.name for p in run_dir.iterdir()] if run_dir.is_dir() else []
        marker = str(run_dir).encode()
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                try:
                    if marker in proc.joinpath("environ").read_bytes():
                        names.append(f"pid {proc.name}")
                except OSError:
                    continue
        return names
    from forge_cli.runtime.kubernetes import apis_for

    apis, _ = apis_for(runtime)
    pods = apis.core.list_namespaced_pod(runtime.namespace, label_selector=f"{LABEL_RUN}={label_value(run_id)}")
    return [p.metadata.name for p in pods.items]


@pytest.fixture
def sandboxes(kind: str) -> Iterator[Factory]:
    """A factory for the test; afterwards nothing of its run may be left on the backend."""
    factory = Factory(kind)
    yield factory
    left = factory.leftovers()
    if left:
        run(factory.cls.cleanup(factory.run_id, factory.runtime))
    assert not left, f"sandboxes left behind by the test: {left}"


Runner = Callable[[Coroutine[Any, Any, T]], T]
