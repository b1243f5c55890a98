"""kubernetes backend (official ``kubernetes`` client): one Pod per rollout, egress only to the proxy.

Creating a sandbox creates the NetworkPolicy and the Pod of :mod:`k8s_manifests` and waits until the
Pod runs (image problems end the wait with one clear message). Commands and file transfers go through
the exec stream API (files: ``head -c N > path`` fed on stdin, ``cat path`` read back, binary-safe).
Every API call is bounded by a per-cluster semaphore and retried on transient errors (429, 5xx,
connection resets). ``cleanup`` deletes Pods and NetworkPolicies by the ``forge.run`` label.

No cluster runs on forge's CI machines: the call sequence is tested against a recorded fake, and
the conformance suite runs against a real cluster when ``KUBECONFIG`` is set (see tests/runtime).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from forge_cli.config.schema import KubernetesRuntime
from forge_cli.errors import UserError
from forge_cli.runtime.base import (
    SandboxConfigError,
    SandboxError,
    SandboxGone,
    SandboxUnavailable,
    blocking,
)
from forge_cli.runtime.container import ContainerSandbox, ContainerState, Emit
from forge_cli.runtime.k8s_manifests import network_policy, pod_manifest, replica_host, tools_host
from forge_cli.runtime.spec import LABEL_RUN, ProxyEndpoint, label_value

log = logging.getLogger("forge.runtime.kubernetes")
T = TypeVar("T")
TRANSIENT_STATUS = {0, 408, 429, 500, 502, 503, 504}
IMAGE_PROBLEMS = {"ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName",
                  "CreateContainerConfigError", "CreateContainerError"}
CONTEXT_FIX = ("point KUBECONFIG at a cluster or set runtime.context (a local one: "
               "`kind create cluster && kind load docker-image forge-base:bookworm`)")


class KubeApis:
    """The parts of the client the backend uses; tests substitute a recorded fake."""

    def __init__(self, runtime: KubernetesRuntime) -> None:
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException

        # a configuration of its own: the client's default ApiClient is a process-wide singleton that would
        # mix up clusters (and keep the first one it saw)
        configuration = client.Configuration()
        try:
            # KUBECONFIG as it is now (the client reads it once, at import)
            config.load_kube_config(config_file=os.environ.get("KUBECONFIG", "~/.kube/config"),
                                    context=runtime.context, client_configuration=configuration)
        except (ConfigException, FileNotFoundError, TypeError) as error:
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            try:
                if runtime.context is not None:
                    raise
                config.load_incluster_config(client_configuration=configuration)
            except Exception:
                which = f"context '{runtime.context}'" if runtime.context else "context"
                kubeconfig = os.environ.get("KUBECONFIG", "~/.kube/config (KUBECONFIG is not set)")
                raise SandboxUnavailable(f"no Kubernetes {which} to run sandboxes in: kubeconfig {kubeconfig}: "
                                         f"{reason}; not running inside a cluster either", CONTEXT_FIX) from error
        api_client = client.ApiClient(configuration)
        self.core = client.CoreV1Api(api_client)
        self.net = client.NetworkingV1Api(api_client)
        self.auth = client.AuthorizationV1Api(api_client)  # access reviews (forge k8s check)

    def exec_stream(self, name: str, namespace: str, argv: list[str], stdin: bool) -> Any:
        """An open exec websocket (``kubernetes.stream.ws_client.WSClient``, binary mode)."""
        from kubernetes.stream import stream

        return stream(self.core.connect_get_namespaced_pod_exec, name, namespace, command=argv, container="sandbox",
                      stdin=stdin, stdout=True, stderr=True, tty=False, _preload_content=False, binary=True)


class ApiGate:
    """Bounds concurrent API calls per cluster and retries transient failures with backoff."""

    def __init__(self, limit: int, attempts: int = 5, backoff_s: float = 0.2) -> None:
        self.semaphore = threading.BoundedSemaphore(limit)
        self.attempts = attempts
        self.backoff_s = backoff_s

    def call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        for attempt in range(1, self.attempts + 1):
            try:
                with self.semaphore:
                    return fn(*args, **kwargs)
            except Exception as error:
                status = _status(error)
                if status is None or status not in TRANSIENT_STATUS or attempt == self.attempts:
                    raise
                log.info("%s: transient error %s (attempt %d), retrying", what, status, attempt)
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
        raise AssertionError("unreachable")


def _status(error: BaseException) -> int | None:
    """HTTP status of an API error; 0 for connection-level failures; None for anything else."""
    status = getattr(error, "status", None)
    if isinstance(status, int):
        return status
    if isinstance(error, ConnectionError | TimeoutError) or type(error).__module__.startswith("urllib3"):
        return 0
    return None


_apis: dict[tuple[str | None, int], tuple[Any, ApiGate]] = {}
_apis_lock = threading.Lock()
# tests replace this to run the backend against a fake API server
api_factory: Callable[[KubernetesRuntime], Any] = KubeApis


def apis_for(runtime: KubernetesRuntime) -> tuple[Any, ApiGate]:
    key = (runtime.context, id(api_factory))
    with _apis_lock:
        if key not in _apis:
            _apis[key] = (api_factory(runtime), ApiGate(runtime.max_api_concurrency))
        return _apis[key]


def _kube_error(what: str, error: BaseException) -> SandboxError:
    status = _status(error)
    body = str(getattr(error, "body", "") or getattr(error, "reason", "") or error).strip()[:300]
    if status == 0:
        return SandboxUnavailable(f"{what}: cannot reach the Kubernetes API server ({body})", CONTEXT_FIX)
    if status in (401, 403):
        return SandboxConfigError(f"{what}: the API server refused it ({status}: {body})",
                                  "apply the RBAC that `forge k8s manifests` prints")
    if status == 404:
        return SandboxGone(f"{what}: not found ({body})")
    if status is not None and 400 <= status < 500:
        return SandboxConfigError(f"{what}: the API server rejected it ({status}: {body})")
    return SandboxError(f"{what}: {type(error).__name__}: {body}")


def _no_aliases_dumper() -> Any:
    import yaml

    class NoAliases(yaml.SafeDumper):
        """Manifests are read by people: repeat shared sub-trees instead of emitting YAML anchors."""

        def ignore_aliases(self, data: Any) -> bool:
            return True

    return NoAliases


class KubernetesSandbox(ContainerSandbox):
    kind = "kubernetes"
    # how long a Pod may take to be scheduled and start (image pulls included)
    START_TIMEOUT_S = 300.0
    DELETE_TIMEOUT_S = 60.0
    POLL_S = 0.5

    def __init__(self, spec: Any, runtime: KubernetesRuntime, log_dir: Path | None = None) -> None:
        super().__init__(spec, runtime, log_dir)
        self.namespace = runtime.namespace
        self.pod_name = spec.name
        self._created: list[str] = []

    @classmethod
    def default_runtime(cls) -> KubernetesRuntime:
        return KubernetesRuntime(kind="kubernetes", description="kubernetes sandboxes")

    @classmethod
    def check_proxy(cls, runtime: Any, proxy_url: str | None) -> None:
        # pods call the in-cluster proxy replicas: a proxy forge starts here would hold other rollout keys (every
        # pod call a 401) and never see their records; proxy.url lists every replica, in order, so that a rollout
        # registered on replica i is sent to replica i
        from forge_cli.config.schema import upstream_urls

        hosts = [replica_host(runtime, i) for i in range(runtime.proxy_replicas)]
        if proxy_url is None:
            forwards = " & ".join(f"kubectl -n {runtime.namespace} port-forward pod/{host.split('.')[0]} "
                                  f"{runtime.proxy_port + i}:{runtime.proxy_port}" for i, host in enumerate(hosts))
            urls = ",".join(f"http://127.0.0.1:{runtime.proxy_port + i}" for i in range(len(hosts)))
            urls = urls if len(hosts) == 1 else f"'{urls}'"  # a comma in an override value needs the quotes
            raise UserError(
                f"runtime=kubernetes: the pods call the in-cluster capture proxy ({', '.join(hosts)}), so forge must "
                "register the rollouts there and read their records from it: set proxy.url to "
                + ("that proxy" if len(hosts) == 1 else "each replica, in order,") + " as this machine reaches it",
                fix=f"{forwards} & then proxy.url={urls} with FORGE_PROXY_TOKEN set to the forge-proxy-token Secret's "
                    "token, or run forge in the cluster: forge k8s manifests --with-controller (docs/sandboxes.md)",
                exit_code=2)
        count = len(upstream_urls(proxy_url))
        if count != runtime.proxy_replicas:
            raise UserError(
                f"proxy.url names {count} prox{'y' if count == 1 else 'ies'} but the cluster runs "
                f"runtime.proxy_replicas={runtime.proxy_replicas} ({', '.join(hosts)}): a rollout registered on the "
                "i-th URL is sent to the i-th replica, so both must list the same replicas in the same order",
                fix=f"list every replica in proxy.url, or set runtime.proxy_replicas={count} to what "
                    "forge k8s manifests --proxy-replicas deployed", exit_code=2)

    @classmethod
    def proxy_endpoint(cls, runtime: Any, advertise_host: str, port: int, replica: int = 0) -> ProxyEndpoint:
        # pods reach replica i of the in-cluster StatefulSet by its own name (a port-forward's loopback address is
        # this machine's way in, not theirs); an in-cluster name in proxy.url (forge running in the cluster) is
        # theirs too
        if advertise_host.endswith((".svc", ".svc.cluster.local")):
            return ProxyEndpoint(advertise_host, port)
        return ProxyEndpoint(replica_host(runtime, replica), runtime.proxy_port)

    @classmethod
    def check_tool_server(cls, runtime: Any, advertise_host: str) -> None:
        # the NetworkPolicy lets pods reach only the proxy replicas and the in-cluster controller's tool server
        if advertise_host != tools_host(runtime):

            raise UserError(
                f"runtime=kubernetes: these tasks have tools, served by forge's tool server, which the pods reach only "
                f"in the cluster, as {tools_host(runtime)}:{runtime.tools_port} (tools.advertise_host is "
                f"{advertise_host})",
                fix="run forge in the cluster: forge k8s manifests --with-controller OVERRIDES... | kubectl apply -f - "
                    "(its Job serves the tools there), or pick tasks without tools", exit_code=2)

    @classmethod
    def network(cls, runtime: Any) -> str:
        return "proxy-only"

    @classmethod
    def describe(cls, spec: Any, argv: Sequence[str], runtime: Any) -> dict[str, Any]:
        import yaml

        manifests = [pod_manifest(spec, runtime), network_policy(spec, runtime)]
        user = (f"every process as {runtime.run_as_user}:{runtime.run_as_group}" if runtime.pod_security == "restricted"
                else "sandboxes as their image's user")
        return {"kind": "kubernetes", "context": runtime.context or "(current)",
                # what the cluster must pull, and where each comes from (push them to a registry its nodes reach)
                "images": {"sandbox (env.image)": spec.image,
                           "harness bundles (runtime.bundle_image)": f"{runtime.bundle_image}: forge image build "
                                                                     "--builtin bundles",
                           "proxy and controller (runtime.proxy_image)": f"{runtime.proxy_image}: forge image build "
                                                                         "--builtin controller"},
                "pod_security": f"{runtime.pod_security} ({user})",
                "manifests": yaml.dump_all(manifests, Dumper=_no_aliases_dumper(), sort_keys=False)}

    def _call(self, what: str, method: str, *args: Any, api: str = "core", **kwargs: Any) -> Any:
        apis, gate = apis_for(self.runtime)
        try:
            return gate.call(what, getattr(getattr(apis, api), method), *args, **kwargs)
        except SandboxError:
            raise
        except Exception as error:
            raise _kube_error(what, error) from error

    # ------------------------------------------------------------------ lifecycle
    async def _start(self) -> None:
        await blocking(self._start_blocking)

    def _start_blocking(self) -> None:
        what = f"creating sandbox {self.pod_name} in namespace {self.namespace}"
        self._call(what, "create_namespaced_network_policy", self.namespace, network_policy(self.spec, self.runtime),
                   api="net")
        self._created.append("networkpolicy")
        self._call(what, "create_namespaced_pod", self.namespace, pod_manifest(self.spec, self.runtime))
        self._created.append("pod")
        limit = time.monotonic() + min(self.START_TIMEOUT_S, float(self.spec.timeout_s))
        while True:
            pod = self._call(what, "read_namespaced_pod", self.pod_name, self.namespace)
            phase = pod.status.phase if pod.status else None
            if phase == "Running":
                return
            problem = _pod_problem(pod)
            if problem:
                raise SandboxConfigError(f"{what}: {problem}",
                                         f"make image '{self.spec.image}' available to the cluster "
                                         "(e.g. `kind load docker-image IMAGE`)")
            if phase in ("Failed", "Succeeded"):
                raise SandboxError(f"{what}: the pod ended before it ran ({phase}: {pod.status.message or ''})")
            if time.monotonic() > limit:
                raise SandboxError(f"{what}: the pod did not start within {limit:.0f}s (phase {phase})")
            time.sleep(self.POLL_S)

    async def _stop(self) -> None:
        await blocking(self._stop_blocking)

    def _stop_blocking(self) -> None:
        what = f"removing sandbox {self.pod_name}"
        if "pod" in self._created:
            if self.log_dir is not None:
                with contextlib.suppress(SandboxError):
                    logs = self._call(what, "read_namespaced_pod_log", self.pod_name, self.namespace,
                                      container="sandbox")
                    (self.log_dir / "container.log").write_text(str(logs))
            with contextlib.suppress(SandboxGone):
                self._call(what, "delete_namespaced_pod", self.pod_name, self.namespace, grace_period_seconds=0)
            self._wait_gone(what)
        if "networkpolicy" in self._created:
            with contextlib.suppress(SandboxGone):
                self._call(what, "delete_namespaced_network_policy", self.pod_name, self.namespace, api="net")

    def _wait_gone(self, what: str) -> None:
        """Until the deleted Pod has left the API (a terminating Pod still counts as left behind)."""
        limit = time.monotonic() + self.DELETE_TIMEOUT_S
        while time.monotonic() < limit:
            try:
                self._call(what, "read_namespaced_pod", self.pod_name, self.namespace)
            except SandboxGone:
                return
            time.sleep(self.POLL_S)
        raise SandboxError(f"{what}: the pod was still terminating after {self.DELETE_TIMEOUT_S:.0f}s")

    @classmethod
    async def _cleanup(cls, run_id: str | None, runtime: Any) -> list[str]:
        return await blocking(cls._cleanup_blocking, run_id, runtime)

    @classmethod
    def _cleanup_blocking(cls, run_id: str | None, runtime: KubernetesRuntime) -> list[str]:
        apis, gate = apis_for(runtime)
        selector = f"{LABEL_RUN}={label_value(run_id)}" if run_id else LABEL_RUN
        ns = runtime.namespace
        try:
            pods = gate.call("listing sandboxes", apis.core.list_namespaced_pod, ns, label_selector=selector)
            names = [pod.metadata.name for pod in pods.items]
            gate.call("deleting sandboxes", apis.core.delete_collection_namespaced_pod, ns, label_selector=selector,
                      grace_period_seconds=0)
            gate.call("deleting network policies", apis.net.delete_collection_namespaced_network_policy, ns,
                      label_selector=selector)
            limit = time.monotonic() + cls.DELETE_TIMEOUT_S
            while names and time.monotonic() < limit:
                if not gate.call("listing sandboxes", apis.core.list_namespaced_pod, ns, label_selector=selector).items:
                    break
                time.sleep(cls.POLL_S)
        except Exception as error:
            raise _kube_error(f"cleaning up sandboxes in namespace {ns}", error) from error
        return names

    # ------------------------------------------------------------------ exec
    def _run_blocking(self, argv: list[str], emit: Emit, stdin: bytes | None = None) -> int | None:
        apis, gate = apis_for(self.runtime)
        what = f"running a command in sandbox {self.pod_name}"
        try:
            ws = gate.call(what, apis.exec_stream, self.pod_name, self.namespace, argv, stdin is not None)
        except Exception as error:
            raise _kube_error(what, error) from error
        try:
            if stdin is not None:
                ws.write_stdin(stdin)
            while ws.is_open():
                ws.update(timeout=1)
                self._pump(ws, emit)
            self._pump(ws, emit)
            code = ws.returncode
        except Exception as error:
            raise SandboxUnavailable(f"{what}: the exec stream broke ({error})", CONTEXT_FIX) from error
        finally:
            with contextlib.suppress(Exception):
                ws.close()
        return code if isinstance(code, int) else None

    @staticmethod
    def _pump(ws: Any, emit: Emit) -> None:
        if ws.peek_stdout():
            emit("stdout", _as_bytes(ws.read_stdout()))
        if ws.peek_stderr():
            emit("stderr", _as_bytes(ws.read_stderr()))

    def _container_state(self) -> ContainerState:
        try:
            pod = self._call(f"inspecting sandbox {self.pod_name}", "read_namespaced_pod", self.pod_name,
                             self.namespace)
        except SandboxGone:
            return ContainerState(running=False, detail="the pod was deleted")
        phase = pod.status.phase if pod.status else None
        terminated = None
        for status in (pod.status.container_statuses or []) if pod.status else []:
            if status.name == "sandbox" and status.state and status.state.terminated:
                terminated = status.state.terminated
        if phase == "Running" and terminated is None:
            return ContainerState(running=True)
        reason = (terminated.reason if terminated else None) or (pod.status.reason if pod.status else None) or ""
        return ContainerState(running=False, oom_killed=reason == "OOMKilled", detail=f"{phase} {reason}".strip())

    # ------------------------------------------------------------------ files
    async def _write_file(self, path: str, data: bytes) -> None:
        await self._exec_write_file(path, data)

    async def _read_file(self, path: str) -> bytes:
        return await self._exec_read_file(path)


def _as_bytes(data: str | bytes) -> bytes:
    return data.encode() if isinstance(data, str) else data


def _pod_problem(pod: Any) -> str | None:
    """Why a pending Pod will not start on its own (image missing, bad config), or None."""
    statuses = list(pod.status.init_container_statuses or []) + list(pod.status.container_statuses or [])
    for status in statuses:
        waiting = status.state.waiting if status.state else None
        if waiting is not None and waiting.reason in IMAGE_PROBLEMS:
            return f"container {status.name}: {waiting.reason}: {waiting.message or status.image}"
    return None
