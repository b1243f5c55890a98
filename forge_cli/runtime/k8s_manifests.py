"""A SandboxSpec as a Kubernetes Pod and the NetworkPolicy that limits its egress to the proxy; what a cluster needs
once (``forge k8s manifests``): RBAC, the proxy replicas, and optionally forge itself as a Job."""

from __future__ import annotations

import json
from typing import Any

from forge_cli.config.schema import KubernetesRuntime
from forge_cli.runtime.spec import LABEL_ROLLOUT, SandboxSpec

BUNDLE_VOLUME = "harness-bundle"
# where the bundles image (forge image build --builtin bundles, runtime.bundle_image) holds each bundle: /bundles/<name>
BUNDLES_MOUNT = "/bundles"
# the sandbox container's command: PID 1 of the pod, idle while forge execs into it (docker's layout=pod copies it)
POD_IDLE = ("sleep", "infinity")
CONTROLLER_APP = "forge-controller"
# the controller image (forge image build --builtin controller): its non-root user, HOME and FORGE_HOME
CONTROLLER_UID = 1000
CONTROLLER_HOME = "/home/forge"
CONTROLLER_FORGE_HOME = f"{CONTROLLER_HOME}/.cache/forge"


def replica_host(runtime: KubernetesRuntime, index: int) -> str:
    """The in-cluster name of proxy replica ``index``: its StatefulSet pod under the headless Service."""
    return f"{runtime.proxy_service}-{index}.{runtime.proxy_service}.{runtime.namespace}.svc"


def replica_urls(runtime: KubernetesRuntime) -> list[str]:
    """Every proxy replica's URL as forge reaches it inside the cluster (proxy.url of the controller Job)."""
    return [f"http://{replica_host(runtime, i)}:{runtime.proxy_port}" for i in range(runtime.proxy_replicas)]


def tools_host(runtime: KubernetesRuntime) -> str:
    """The in-cluster name of forge's tool server (the Service in front of the controller Job's pod)."""
    return f"{runtime.tools_service}.{runtime.namespace}.svc"


def plain(data: Any) -> Any:
    """A copy without shared sub-objects (YAML would print them as anchors and aliases)."""
    return json.loads(json.dumps(data))

WORK_VOLUME = "work"


def _quantities(spec: SandboxSpec) -> dict[str, str]:
    return {"cpu": f"{int(spec.resources.cpus * 1000)}m", "memory": str(spec.resources.memory_bytes)}


# every container forge emits: no privilege escalation, no capability, the runtime's default seccomp filter
CONTAINER_SECURITY: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
PSS_LABEL = "pod-security.kubernetes.io/enforce"


def bundle_copy(source: str, target: str) -> list[str]:
    """The init container's command that copies a bundle image's directory into a pod's emptyDir: ``cp -R`` keeps
    modes and symlinks; ``cp -a`` would fail as a non-root user, which may not set the times of the emptyDir it
    does not own."""
    return ["cp", "-R", f"{source}/.", f"{target}/"]


def _restricted(uid: int, gid: int) -> dict[str, Any]:
    return {"seccompProfile": {"type": "RuntimeDefault"}, "runAsNonRoot": True, "runAsUser": uid, "runAsGroup": gid,
            "fsGroup": gid}


def pod_security(runtime: KubernetesRuntime) -> dict[str, Any]:
    """A sandbox pod's securityContext: restricted (``runtime.pod_security``) runs every process as
    ``run_as_user:run_as_group`` (volumes group-owned by it), baseline as the image's user; both keep seccomp."""
    if runtime.pod_security == "restricted":
        return _restricted(runtime.run_as_user, runtime.run_as_group)
    return {"seccompProfile": {"type": "RuntimeDefault"}}


# forge's own pods (the proxy replicas, the controller Job): restricted, as the controller image's user whatever the
# sandboxes run as (its HOME and $FORGE_HOME belong to that user)
FORGE_POD_SECURITY = _restricted(CONTROLLER_UID, CONTROLLER_UID)


def pod_manifest(spec: SandboxSpec, runtime: KubernetesRuntime) -> dict[str, Any]:
    """One Pod per rollout: idle main container, bundle copied in by an init container."""
    security = CONTAINER_SECURITY
    volumes: list[dict[str, Any]] = [{"name": WORK_VOLUME, "emptyDir": {}}]
    mounts: list[dict[str, Any]] = [{"name": WORK_VOLUME, "mountPath": spec.workdir}]
    init: list[dict[str, Any]] = []
    if spec.bundle_host_path is not None:
        volumes.append({"name": BUNDLE_VOLUME, "emptyDir": {}})
        mounts.append({"name": BUNDLE_VOLUME, "mountPath": spec.bundle_mount, "readOnly": True})
        bundle_dir = spec.bundle_host_path.rstrip("/").rsplit("/", 1)[-1]
        init.append({
            "name": "bundle",
            "image": runtime.bundle_image,
            "imagePullPolicy": runtime.image_pull_policy,
            "command": bundle_copy(f"{BUNDLES_MOUNT}/{bundle_dir}", "/mnt/bundle"),
            "volumeMounts": [{"name": BUNDLE_VOLUME, "mountPath": "/mnt/bundle"}],
            "securityContext": security,
        })
    quantities = _quantities(spec)
    return plain({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": spec.name, "namespace": runtime.namespace, "labels": spec.all_labels},
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": spec.timeout_s,
            "automountServiceAccountToken": False,
            "serviceAccountName": runtime.service_account,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 5,
            "securityContext": pod_security(runtime),
            "initContainers": init,
            "containers": [{
                "name": "sandbox",
                "image": spec.image,
                "imagePullPolicy": runtime.image_pull_policy,
                "command": list(POD_IDLE),
                "workingDir": spec.workdir,
                "env": [{"name": k, "value": v} for k, v in spec.env.items()],
                "resources": {"requests": quantities, "limits": quantities},
                "volumeMounts": mounts,
                "securityContext": security,
            }],
            "volumes": volumes,
        },
    })


def network_policy(spec: SandboxSpec, runtime: KubernetesRuntime) -> dict[str, Any]:
    """Egress from the rollout's Pod only to the proxy replicas, the in-cluster tool server (and DNS); no ingress."""
    return plain({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": spec.name, "namespace": runtime.namespace, "labels": spec.all_labels},
        "spec": {
            "podSelector": {"matchLabels": {LABEL_ROLLOUT: spec.all_labels[LABEL_ROLLOUT]}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": [
                {
                    "to": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": runtime.proxy_service}}}],
                    "ports": [{"protocol": "TCP", "port": runtime.proxy_port}],
                },
                {   # forge's tool server, when forge runs in the cluster (the controller Job)
                    "to": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": CONTROLLER_APP}}}],
                    "ports": [{"protocol": "TCP", "port": runtime.tools_port}],
                },
                {
                    "to": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
                    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                },
            ],
        },
    })


CONTROLLER_ACCOUNT = "forge"
# the in-cluster proxy's admin token: Secret name/key and the variable it reaches the proxy (and forge) in
PROXY_TOKEN_SECRET = "forge-proxy-token"
PROXY_TOKEN_ENV = "FORGE_PROXY_TOKEN"


def cluster_manifests(runtime: KubernetesRuntime) -> list[dict[str, Any]]:
    """What a cluster needs once before forge runs sandboxes in it (``forge k8s manifests``).

    The namespace; the sandbox service account (no API permissions, token not mounted); forge's own
    service account with a Role for exactly what the backend calls (pods, pods/exec, pods/log,
    networkpolicies); and the capture proxy as a StatefulSet of ``runtime.proxy_replicas`` replicas behind a headless
    Service (replica i: :func:`replica_host`), its admin token from the Secret ``forge-proxy-token`` (key ``token``)
    that the user creates.
    """
    ns = runtime.namespace
    app = {"app.kubernetes.io/name": runtime.proxy_service, "app.kubernetes.io/part-of": "forge"}
    meta = {"namespace": ns, "labels": {"app.kubernetes.io/part-of": "forge"}}
    docs: list[dict[str, Any]] = [
        # the namespace enforces the profile forge's pods comply with (the API server refuses any other pod)
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": ns, "labels": {"app.kubernetes.io/part-of": "forge", PSS_LABEL: runtime.pod_security,
                                             f"{PSS_LABEL}-version": "latest"}}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": runtime.service_account, **meta},
         "automountServiceAccountToken": False},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": CONTROLLER_ACCOUNT, **meta}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": CONTROLLER_ACCOUNT, **meta},
         "rules": [
             {"apiGroups": [""], "resources": ["pods"],
              "verbs": ["create", "get", "list", "watch", "delete", "deletecollection"]},
             {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"]},
             {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
             {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
              "verbs": ["create", "get", "list", "delete", "deletecollection"]},
         ]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": CONTROLLER_ACCOUNT, **meta},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": CONTROLLER_ACCOUNT},
         "subjects": [{"kind": "ServiceAccount", "name": CONTROLLER_ACCOUNT, "namespace": ns}]},
        {"apiVersion": "apps/v1", "kind": "StatefulSet",
         "metadata": {"name": runtime.proxy_service, "namespace": ns, "labels": app},
         "spec": {
             "replicas": runtime.proxy_replicas,
             # pod i is <service>-i.<service>.<namespace>.svc: each rollout's harness calls the replica it was
             # registered on; replicas start and stop independently
             "serviceName": runtime.proxy_service,
             "podManagementPolicy": "Parallel",
             "selector": {"matchLabels": {"app.kubernetes.io/name": runtime.proxy_service}},
             "template": {
                 "metadata": {"labels": app},
                 "spec": {
                     "serviceAccountName": CONTROLLER_ACCOUNT,
                     "automountServiceAccountToken": False,
                     "securityContext": FORGE_POD_SECURITY,
                     "containers": [{
                         "name": "proxy",
                         "image": runtime.proxy_image,
                         "imagePullPolicy": runtime.image_pull_policy,
                         "command": [*runtime.proxy_command, "--upstream", runtime.proxy_upstream, "--host", "0.0.0.0",
                                     "--port", str(runtime.proxy_port), "--admin-token-env", PROXY_TOKEN_ENV],
                         # the admin token forge presents (proxy.url through a port-forward): a Secret the user
                         # creates, never in these manifests (docs/sandboxes.md)
                         "env": [{"name": PROXY_TOKEN_ENV, "valueFrom": {"secretKeyRef": {
                             "name": PROXY_TOKEN_SECRET, "key": "token"}}}],
                         "ports": [{"name": "proxy", "containerPort": runtime.proxy_port, "protocol": "TCP"}],
                         "readinessProbe": {"tcpSocket": {"port": runtime.proxy_port}, "periodSeconds": 2},
                         "securityContext": CONTAINER_SECURITY,
                     }],
                 },
             },
         }},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": runtime.proxy_service, "namespace": ns, "labels": app},
         "spec": {"clusterIP": "None",  # headless: one DNS name per replica, no load balancing between them
                  "selector": {"app.kubernetes.io/name": runtime.proxy_service},
                  "ports": [{"name": "proxy", "port": runtime.proxy_port, "targetPort": runtime.proxy_port,
                             "protocol": "TCP"}]}},
    ]
    return [plain(doc) for doc in docs]
