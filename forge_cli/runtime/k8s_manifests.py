"""A SandboxSpec as a Kubernetes Pod and the NetworkPolicy that limits its egress to the proxy."""

from __future__ import annotations

from typing import Any

from forge_cli.config.schema import KubernetesRuntime
from forge_cli.runtime.spec import LABEL_ROLLOUT, SandboxSpec

BUNDLE_VOLUME = "harness-bundle"
WORK_VOLUME = "work"


def _quantities(spec: SandboxSpec) -> dict[str, str]:
    return {"cpu": f"{int(spec.resources.cpus * 1000)}m", "memory": str(spec.resources.memory_bytes)}


def pod_manifest(spec: SandboxSpec, runtime: KubernetesRuntime) -> dict[str, Any]:
    """One Pod per rollout: idle main container, bundle copied in by an init container."""
    security = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
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
            "command": ["cp", "-a", f"/bundles/{bundle_dir}/.", "/mnt/bundle/"],
            "volumeMounts": [{"name": BUNDLE_VOLUME, "mountPath": "/mnt/bundle"}],
            "securityContext": security,
        })
    quantities = _quantities(spec)
    return {
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
            "initContainers": init,
            "containers": [{
                "name": "sandbox",
                "image": spec.image,
                "imagePullPolicy": runtime.image_pull_policy,
                "command": ["sleep", "infinity"],
                "workingDir": spec.workdir,
                "env": [{"name": k, "value": v} for k, v in spec.env.items()],
                "resources": {"requests": quantities, "limits": quantities},
                "volumeMounts": mounts,
                "securityContext": security,
            }],
            "volumes": volumes,
        },
    }


def network_policy(spec: SandboxSpec, runtime: KubernetesRuntime) -> dict[str, Any]:
    """Egress from the rollout's Pod only to the proxy Service's pods (and DNS); no ingress."""
    return {
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
                {
                    "to": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
                    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                },
            ],
        },
    }
