"""The sandbox runtimes' options (``runtime:``): one class per backend, registered by ``kind``.

Re-exported by :mod:`forge_cli.config.schema`, where the experiment that holds them is defined.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator

from forge_cli.config.fields import Strict, parse_memory, upstream_urls
from forge_cli.plugins import Registry


class Resources(Strict):
    cpus: Annotated[float, Field(gt=0)] = 1.0
    memory: str = "2g"
    pids: Annotated[int, Field(gt=0)] = 512

    @field_validator("memory")
    @classmethod
    def _memory(cls, value: str) -> str:
        parse_memory(value)
        return value

    @property
    def memory_bytes(self) -> int:
        return parse_memory(self.memory)


class RuntimeOptions(Strict):
    """Where each rollout's sandbox runs (``runtime:``, configs/runtime/): the options of one sandbox backend.

    A backend registers its options class by ``kind`` on definition (``class MyRuntime(RuntimeOptions,
    kind="mine")``) and names its ``Sandbox`` class (``forge_cli/runtime/base.py``) in ``sandbox``
    (``module:Class``, imported when a sandbox is made); a package's come through the entry-point group
    ``forge.runtimes`` (``forge_cli/plugins.py``). forge's: local, docker, kubernetes.
    """

    kind: str
    description: str
    # the backend's Sandbox class (``module:Class``)
    sandbox: ClassVar[str] = ""
    workdir: str = "/work"
    bundle_mount: str = "/opt/forge/harness"
    resources: Resources = Resources()

    def __init_subclass__(cls, kind: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if kind:
            RUNTIMES.add(kind, cls)


RUNTIMES: Registry[type[RuntimeOptions]] = Registry("sandbox runtime", RuntimeOptions, "forge.runtimes")


class LocalRuntime(RuntimeOptions, kind="local"):
    kind: Literal["local"]
    sandbox: ClassVar[str] = "forge_cli.runtime.local:LocalSandbox"
    # auto: bubblewrap when usable, else unisolated with a warning; bwrap: required (exit 1 without it); none: opt out
    isolation: Literal["auto", "bwrap", "none"] = "auto"


class DockerRuntime(RuntimeOptions, kind="docker"):
    kind: Literal["docker"]
    sandbox: ClassVar[str] = "forge_cli.runtime.docker:DockerSandbox"
    network: str = "host"
    docker_host: str | None = None
    # process layout in the container: "docker" (docker's --init as PID 1, forge's in-container command runner) or
    # "pod" (the idle `sleep infinity` is PID 1 and every command arrives through docker exec, as in a Kubernetes
    # pod): the pod's layout on a docker daemon, so that what holds in a pod can be tested without a cluster
    layout: Literal["docker", "pod"] = "docker"
    # the numeric user ("UID" or "UID:GID") the sandbox's processes run as, as a pod under the restricted Pod Security
    # profile runs (runtime=kubernetes' run_as_user); None: the image's own user. Set, or with layout=pod, the
    # workdir is a fresh directory every user may write (a pod's emptyDir) and files are written through exec as
    # that user
    user: Annotated[str | None, Field(pattern=r"^[0-9]+(:[0-9]+)?$")] = None


class KubernetesRuntime(RuntimeOptions, kind="kubernetes"):
    kind: Literal["kubernetes"]
    sandbox: ClassVar[str] = "forge_cli.runtime.kubernetes:KubernetesSandbox"
    namespace: Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")] = "forge"
    context: str | None = None
    service_account: str = "forge-sandbox"
    proxy_service: str = "forge-proxy"
    proxy_port: Annotated[int, Field(gt=0, lt=65536)] = 8800
    bundle_image: str = "forge-harness-bundles:latest"
    # image and command of the capture proxy Deployment that `forge k8s manifests` prints
    proxy_image: str = "forge:latest"
    proxy_command: list[str] = ["forge", "proxy"]
    # the policy server(s) the in-cluster proxy forwards to (forge proxy --upstream)
    proxy_upstream: str = "http://forge-policy:8000"
    # proxy replicas (a StatefulSet: pod i is <proxy_service>-i.<proxy_service>.<namespace>.svc); proxy.url lists
    # each, in order, as forge reaches it
    proxy_replicas: Annotated[int, Field(ge=1, le=64)] = 1
    # the tool server as pods reach it when forge runs in the cluster (forge k8s manifests --with-controller)
    tools_service: str = "forge-tools"
    tools_port: Annotated[int, Field(gt=0, lt=65536)] = 8900
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    max_api_concurrency: Annotated[int, Field(gt=0)] = 16
    # the Pod Security profile every pod forge creates complies with, and which `forge k8s manifests` labels the
    # namespace to enforce: "restricted" (forge's default: every process as run_as_user:run_as_group, never root) or
    # "baseline" for sandbox images that must run as root (the image's own user; docs/scale.md). forge's own pods
    # (the proxy, the controller Job) are restricted either way
    pod_security: Literal["restricted", "baseline"] = "restricted"
    run_as_user: Annotated[int, Field(ge=1)] = 1000
    run_as_group: Annotated[int, Field(ge=0)] = 1000

    @field_validator("proxy_upstream")
    @classmethod
    def _upstream(cls, value: str) -> str:
        upstream_urls(value)
        return value


# the type of ``Experiment.runtime`` (kept by this name for code written against the former union)
RuntimeConfig = RuntimeOptions


def validate_runtime(value: Any) -> Any:
    """``runtime`` (a mapping) as its backend's options class, picked by ``kind``."""
    if isinstance(value, RuntimeOptions) or not isinstance(value, dict):
        return value
    kind = value.get("kind")
    if not isinstance(kind, str):
        raise ValueError(f"runtime.kind is required ({', '.join(RUNTIMES.names())}, or a backend a package "
                         "registers)")
    try:
        options = RUNTIMES.get(kind)
    except ValueError as exc:
        if ":" in kind:
            raise
        allowed = ", ".join(repr(name) for name in RUNTIMES.names())
        raise ValueError(f"runtime.kind {kind!r} is not a registered sandbox runtime: expected one of {allowed} (a "
                         "package adds one through the entry-point group 'forge.runtimes')") from exc
    return options.model_validate(value)
