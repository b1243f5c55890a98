"""A recorded fake of the Kubernetes API for the kubernetes backend (no cluster runs on these machines).

It answers with the client's own models (V1Pod, V1PodList, ...), checks every body it is given
against them, records each call, and emulates a container's exec: forge's sh wrapper is parsed back
into the command, files live in a dict. It behaves as an API server does where forge depends on it:

- creating an object whose name exists answers 409 AlreadyExists; reading or deleting a missing one 404;
- label selectors (``k=v``, ``k!=v``, ``k``, comma-separated) select what lists and collection deletes act on, for
  pods and NetworkPolicies alike (``leftovers`` counts what a run left through them);
- a pod passes through the phases a pod does (``phases``), reports ``initContainerStatuses`` for its init
  containers beside ``containerStatuses``, and can be made to fail as a real one does (``waiting_reason`` such as
  ``ErrImagePull``/``ImagePullBackOff``, ``terminated_reason`` such as ``OOMKilled``);
- deleting a pod with a grace period leaves it terminating (``deletionTimestamp`` set, still listed and readable)
  for ``grace_reads`` more reads; with ``grace_period_seconds=0`` it is gone at once;
- the kill script can fail (``kill_exit_code``);
- RBAC: a (verb, resource) in ``forbidden`` is refused with 403 on the call and denied by a
  SelfSubjectAccessReview (``auth``), as an authorizer does; with ``namespaces`` set, any other namespace is 404 to
  ``read_namespace`` and to creates.
"""

from __future__ import annotations

import shlex
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from forge_cli.runtime.container import READ_SCRIPT, WRITE_SCRIPT


def to_model(body: dict[str, Any], model: str) -> Any:
    """Deserialize a manifest into the client's model (what the real client would send)."""
    api = client.ApiClient()
    return api._ApiClient__deserialize(body, model)  # type: ignore[attr-defined]


def from_model(model: Any) -> Any:
    return client.ApiClient().sanitize_for_serialization(model)


class FakeWS:
    """Stands in for kubernetes.stream.ws_client.WSClient (binary mode)."""

    def __init__(self, cluster: FakeCluster, argv: list[str], pod: str = "") -> None:
        self.cluster, self.argv, self.pod = cluster, argv, pod
        self.stdin = b""
        self.out = b""
        self.err = b""
        self.code: int | None = None
        self.ran = False

    def write_stdin(self, data: bytes) -> None:
        self.stdin += data

    def is_open(self) -> bool:
        return not self.ran

    def update(self, timeout: float = 0) -> None:
        if not self.ran:
            self.out, self.err, self.code = self.cluster.run_in_container(self.argv, self.stdin, self.pod)
            self.ran = True

    def peek_stdout(self) -> bool:
        return bool(self.out)

    def read_stdout(self) -> bytes:
        out, self.out = self.out, b""
        return out

    def peek_stderr(self) -> bool:
        return bool(self.err)

    def read_stderr(self) -> bytes:
        err, self.err = self.err, b""
        return err

    @property
    def returncode(self) -> int | None:
        return self.code

    def close(self) -> None:
        return None


# what each call is, for RBAC: (verb, resource[/subresource])
RBAC_VERBS = {
    "create_namespaced_pod": ("create", "pods"), "read_namespaced_pod": ("get", "pods"),
    "list_namespaced_pod": ("list", "pods"), "delete_namespaced_pod": ("delete", "pods"),
    "delete_collection_namespaced_pod": ("deletecollection", "pods"), "read_namespaced_pod_log": ("get", "pods/log"),
    "exec_check": ("create", "pods/exec"),
    "create_namespaced_network_policy": ("create", "networkpolicies"),
    "list_namespaced_network_policy": ("list", "networkpolicies"),
    "delete_namespaced_network_policy": ("delete", "networkpolicies"),
    "delete_collection_namespaced_network_policy": ("deletecollection", "networkpolicies"),
}


class _Api:
    def __init__(self, cluster: FakeCluster) -> None:
        self._cluster = cluster

    def __getattr__(self, name: str) -> Callable[..., Any]:
        return lambda *args, **kwargs: self._cluster.call(name, *args, **kwargs)


class FakeCluster:
    """Records calls; ``phases`` is the sequence of pod phases read_namespaced_pod returns."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.pods: dict[str, dict[str, Any]] = {}
        self.policies: dict[str, dict[str, Any]] = {}
        self.files: dict[str, bytes] = {}
        self.phases: list[str] = ["Pending", "Running"]
        self.waiting_reason: str | None = None
        self.terminated_reason: str | None = None
        self.failures: dict[str, list[int]] = {}
        self.commands: dict[str, tuple[bytes, bytes, int]] = {}
        # a program the "container" runs: (pod name, argv) -> (stdout, stderr, exit code), or None to fall through
        self.on_command: Callable[[str, list[str]], tuple[bytes, bytes, int] | None] | None = None
        # reads a pod deleted with a grace period stays terminating; the exit code of forge's kill script
        self.grace_reads = 2
        self.terminating: dict[str, int] = {}
        self.kill_exit_code = 0
        self.delay_s = 0.0
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        # RBAC refusals, (verb, resource) as in RBAC_VERBS; the namespaces that exist (None: any)
        self.forbidden: set[tuple[str, str]] = set()
        self.namespaces: set[str] | None = None
        # each namespace's labels (the Pod Security level it enforces: pod-security.kubernetes.io/enforce)
        self.namespace_labels: dict[str, dict[str, str]] = {}
        self.core = _Api(self)
        self.net = _Api(self)
        self.auth = _Api(self)

    # the factory the backend calls: api_factory(runtime)
    def __call__(self, runtime: Any) -> FakeCluster:
        return self

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            time.sleep(self.delay_s)
            pending = self.failures.get(name)
            if pending:
                status = pending.pop(0)
                self.calls.append((name, f"error {status}"))
                raise ApiException(status=status, reason="injected")
            rule = RBAC_VERBS.get(name)
            if rule in self.forbidden:
                self.calls.append((name, "error 403"))
                raise ApiException(status=403, reason=f'{rule[1]} is forbidden: User "canary" cannot {rule[0]} '
                                                      f'resource "{rule[1]}" in the namespace')
            return getattr(self, f"_{name}")(*args, **kwargs)
        finally:
            with self.lock:
                self.in_flight -= 1

    # ---------------------------------------------------------------- CoreV1Api / NetworkingV1Api
    @staticmethod
    def _exists(kind: str, name: str) -> ApiException:
        return ApiException(status=409, reason=f'{kind} "{name}" already exists (AlreadyExists)')

    def _known(self, namespace: str) -> None:
        if self.namespaces is not None and namespace not in self.namespaces:
            raise ApiException(status=404, reason=f'namespaces "{namespace}" not found')

    def _read_namespace(self, name: str) -> Any:
        self.calls.append(("read_namespace", name))
        self._known(name)
        return to_model({"metadata": {"name": name, "labels": self.namespace_labels.get(name) or None}},
                        "V1Namespace")

    def _create_self_subject_access_review(self, body: dict[str, Any]) -> Any:
        model = to_model(body, "V1SelfSubjectAccessReview")
        assert from_model(model) == body, "the access review has fields the client's model does not know"
        asked = body["spec"]["resourceAttributes"]
        resource = asked["resource"] + (f"/{asked['subresource']}" if asked.get("subresource") else "")
        allowed = (asked["verb"], resource) not in self.forbidden
        self.calls.append(("create_self_subject_access_review", asked["verb"], resource))
        return to_model({**body, "status": {"allowed": allowed}}, "V1SelfSubjectAccessReview")

    def _create_namespaced_network_policy(self, namespace: str, body: dict[str, Any]) -> Any:
        model = to_model(body, "V1NetworkPolicy")
        assert from_model(model) == body, "the NetworkPolicy has fields the client's model does not know"
        name = body["metadata"]["name"]
        self.calls.append(("create_namespaced_network_policy", namespace, name))
        self._known(namespace)
        if name in self.policies:
            raise self._exists("networkpolicies.networking.k8s.io", name)
        self.policies[name] = body
        return model

    def _create_namespaced_pod(self, namespace: str, body: dict[str, Any]) -> Any:
        model = to_model(body, "V1Pod")
        assert from_model(model) == body, "the Pod has fields the client's model does not know"
        name = body["metadata"]["name"]
        self.calls.append(("create_namespaced_pod", namespace, name))
        self._known(namespace)
        if name in self.pods:
            raise self._exists("pods", name)
        self.pods[name] = body
        return model

    def _tick_terminating(self, name: str) -> None:
        """One more read of a terminating pod: gone once its grace has passed."""
        if name in self.terminating:
            self.terminating[name] -= 1
            if self.terminating[name] < 0:
                del self.terminating[name]
                self.pods.pop(name, None)

    def _read_namespaced_pod(self, name: str, namespace: str) -> Any:
        self.calls.append(("read_namespaced_pod", name))
        self._tick_terminating(name)
        if name not in self.pods:
            raise ApiException(status=404, reason="Not Found")
        phase = self.phases.pop(0) if len(self.phases) > 1 else self.phases[0]
        state: dict[str, Any] = {"running": {}} if phase == "Running" else {"waiting": {"reason": "ContainerCreating"}}
        if self.waiting_reason:
            state = {"waiting": {"reason": self.waiting_reason, "message": "image not found"}}
        if self.terminated_reason:
            state = {"terminated": {"reason": self.terminated_reason, "exitCode": 137}}
        spec = self.pods[name]["spec"]
        # init containers run (and complete) before the sandbox container starts
        inits = [{"name": c["name"], "image": c["image"], "imageID": "", "ready": phase == "Running",
                  "restartCount": 0, "state": ({"terminated": {"reason": "Completed", "exitCode": 0}}
                                               if phase == "Running" else {"running": {}})}
                 for c in spec.get("initContainers") or []]
        if inits and self.waiting_reason and phase == "Pending":  # an init container's image fails first
            inits[0]["state"] = {"waiting": {"reason": self.waiting_reason, "message": "image not found"}}
        metadata = dict(self.pods[name]["metadata"])
        if name in self.terminating:
            metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        status: dict[str, Any] = {"phase": phase, "containerStatuses": [
            {"name": "sandbox", "image": spec["containers"][0]["image"], "imageID": "",
             "ready": phase == "Running", "restartCount": 0, "state": state}]}
        if inits:
            status["initContainerStatuses"] = inits
        return to_model({"metadata": metadata, "status": status}, "V1Pod")

    def _read_namespaced_pod_log(self, name: str, namespace: str, container: str) -> str:
        self.calls.append(("read_namespaced_pod_log", name))
        return ""

    def _delete_pod(self, name: str, grace_period_seconds: int | None) -> None:
        if grace_period_seconds == 0:
            self.terminating.pop(name, None)
            self.pods.pop(name, None)
        elif name not in self.terminating:
            self.terminating[name] = self.grace_reads

    def _delete_namespaced_pod(self, name: str, namespace: str, grace_period_seconds: int | None = None) -> Any:
        self.calls.append(("delete_namespaced_pod", name))
        if name not in self.pods:
            raise ApiException(status=404, reason="Not Found")
        self._delete_pod(name, grace_period_seconds)

    def _delete_namespaced_network_policy(self, name: str, namespace: str) -> Any:
        self.calls.append(("delete_namespaced_network_policy", name))
        if name not in self.policies:
            raise ApiException(status=404, reason="Not Found")
        del self.policies[name]

    @staticmethod
    def selects(label_selector: str, labels: dict[str, str]) -> bool:
        """An equality-based label selector (``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``; comma: and) on ``labels``."""
        for term in filter(None, (t.strip() for t in label_selector.split(","))):
            if "!=" in term:
                key, value = term.split("!=", 1)
                ok = labels.get(key) != value
            elif "=" in term:
                key, value = term.replace("==", "=").split("=", 1)
                ok = labels.get(key) == value
            elif term.startswith("!"):
                ok = term[1:] not in labels
            else:
                ok = term in labels
            if not ok:
                return False
        return True

    def _selected(self, objects: dict[str, dict[str, Any]], label_selector: str) -> list[str]:
        return [n for n, o in objects.items() if self.selects(label_selector, o["metadata"].get("labels") or {})]

    def _list_namespaced_pod(self, namespace: str, label_selector: str = "") -> Any:
        self.calls.append(("list_namespaced_pod", namespace, label_selector))
        for name in list(self.terminating):
            self._tick_terminating(name)
        items = [self.pods[n] for n in self._selected(self.pods, label_selector)]
        return to_model({"items": [{"metadata": p["metadata"]} for p in items]}, "V1PodList")

    def _list_namespaced_network_policy(self, namespace: str, label_selector: str = "") -> Any:
        self.calls.append(("list_namespaced_network_policy", namespace, label_selector))
        items = [self.policies[n] for n in self._selected(self.policies, label_selector)]
        return to_model({"items": [{"metadata": p["metadata"]} for p in items]}, "V1NetworkPolicyList")

    def _delete_collection_namespaced_pod(self, namespace: str, label_selector: str,
                                          grace_period_seconds: int | None = None) -> None:
        self.calls.append(("delete_collection_namespaced_pod", namespace, label_selector))
        for name in self._selected(self.pods, label_selector):
            self._delete_pod(name, grace_period_seconds)

    def _delete_collection_namespaced_network_policy(self, namespace: str, label_selector: str) -> None:
        self.calls.append(("delete_collection_namespaced_network_policy", namespace, label_selector))
        for name in self._selected(self.policies, label_selector):
            del self.policies[name]

    def leftovers(self, label_selector: str) -> list[str]:
        """What the API still holds under ``label_selector`` (pods, terminating ones too, and NetworkPolicies),
        counted through its own label-selector lists."""
        pods = self._list_namespaced_pod("", label_selector).items
        policies = self._list_namespaced_network_policy("", label_selector).items
        return [f"pod/{p.metadata.name}" for p in pods] + [f"networkpolicy/{p.metadata.name}" for p in policies]

    # ---------------------------------------------------------------- exec
    def exec_stream(self, name: str, namespace: str, argv: list[str], stdin: bool) -> FakeWS:
        self.call("exec_check", name)
        return FakeWS(self, argv, name)

    def _exec_check(self, name: str) -> None:
        if name not in self.pods:
            raise ApiException(status=404, reason="Not Found")

    def run_in_container(self, argv: list[str], stdin: bytes, pod: str = "") -> tuple[bytes, bytes, int]:
        assert argv[:2] == ["/bin/sh", "-c"], argv
        script = argv[2]
        if script == WRITE_SCRIPT:
            path, size = argv[4], int(argv[5])
            self.calls.append(("exec", "write", path))
            self.files[path] = stdin[:size]
            return b"", b"", 0
        if script == READ_SCRIPT:
            path = argv[4]
            self.calls.append(("exec", "read", path))
            return (self.files[path], b"", 0) if path in self.files else (b"", b"", 2)
        if "kill -9" in script or "oom_kill" in script or "memory.oom_control" in script:
            self.calls.append(("exec", "kill" if "kill -9" in script else "oom-counters"))
            if "memory.oom_control" in script and self.terminated_reason is None:
                return b"oom_kill 1\n", b"", 0
            if "kill -9" in script and self.kill_exit_code:
                return b"", b"kill: Operation not permitted\n", self.kill_exit_code
            return b"", b"", 0
        command = shlex.split(script[script.rindex("\nexec ") + 1:])[1:]  # the wrapper's end: exec ARGV (quoted
        # arguments may span lines)
        self.calls.append(("exec", *command))
        if self.on_command is not None:
            ran = self.on_command(pod, command)
            if ran is not None:
                return ran
        return self.commands.get(" ".join(command), (b"", f"{command[0]}: not found\n".encode(), 127))


def install(monkeypatch: Any) -> FakeCluster:
    """A new fake as the kubernetes backend's API server (its polling sped up), for a test's ``cluster`` fixture."""
    from forge_cli.runtime import kubernetes as kube

    fake = FakeCluster()
    monkeypatch.setattr(kube, "api_factory", fake)
    monkeypatch.setattr(kube.KubernetesSandbox, "POLL_S", 0.01)
    monkeypatch.setattr(kube, "_apis", {})
    return fake
