"""forge itself in the cluster (``forge k8s manifests --with-controller``): a Job that runs ``forge rollout`` or
``forge eval`` with ``runtime=kubernetes`` next to the proxy replicas, and the Service through which the rollout
pods reach its tool server.

Run from a laptop, forge reaches the in-cluster proxies through port-forwards (``proxy.url`` on loopback) and the
pods cannot reach its tool server at all (tasks with tools are refused). Run as this Job, forge uses the replicas'
own names (``proxy.url`` = every ``forge-proxy-i.forge-proxy.<ns>.svc``), its tool server listens on all
interfaces behind the ``forge-tools`` Service (the only address the sandbox NetworkPolicy lets pods reach besides
the proxies), it talks to the API server with the ``forge`` service account (the Role of ``cluster_manifests``),
and the run directory lands on a PersistentVolumeClaim that outlives the Job.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from forge_cli.config.schema import KubernetesRuntime
from forge_cli.errors import UserError
from forge_cli.runtime.k8s_manifests import (
    BUNDLES_MOUNT,
    CONTAINER_SECURITY,
    CONTROLLER_ACCOUNT,
    CONTROLLER_APP,
    CONTROLLER_FORGE_HOME,
    FORGE_POD_SECURITY,
    PROXY_TOKEN_ENV,
    PROXY_TOKEN_SECRET,
    bundle_copy,
    plain,
    replica_urls,
    tools_host,
)

VERBS = ("rollout", "eval")
RUNS_CLAIM = "forge-runs"
RUNS_MOUNT = "/runs"
# settings the Job fixes itself: the user's overrides may not change them (the manifests depend on them)
OWNED = ("runtime", "proxy.url", "proxy.upstream", "proxy.replicas", "tools", "run.output_dir")
# composes the Job's experiment as the Job will (ConfigError on a problem): the CLI passes the one that also checks
# the task source's options (forge_cli.envs.resolve.compose_resolved), which runtime/ does not import
Compose = Callable[[list[str]], object]


def controller_args(runtime: KubernetesRuntime, verb: str, overrides: Sequence[str],
                    compose: Compose | None = None) -> list[str]:
    """The Job's command: ``forge VERB`` with the user's overrides and the settings that put it in the cluster,
    composed here first with ``compose`` (None: config's own, which leaves the task source's options unchecked)."""
    if verb not in VERBS:
        raise UserError(f"--controller-command {verb!r}: one of {', '.join(VERBS)}", exit_code=2)
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if "=" not in override or not key:
            raise UserError(f"controller override {override!r} is not KEY=VALUE", exit_code=2)
        if any(key == owned or key.startswith(owned + ".") for owned in OWNED):
            raise UserError(f"controller override {override!r}: {key} is set by --with-controller itself",
                            fix="use forge k8s manifests' own options (--namespace, --proxy-port, --proxy-replicas, "
                                "--proxy-upstream) for these", exit_code=2)
    fixed = [
        "runtime=kubernetes", f"runtime.namespace={runtime.namespace}",
        f"runtime.proxy_service={runtime.proxy_service}",
        f"runtime.proxy_port={runtime.proxy_port}", f"runtime.proxy_replicas={runtime.proxy_replicas}",
        f"runtime.tools_service={runtime.tools_service}", f"runtime.tools_port={runtime.tools_port}",
        f"runtime.bundle_image={runtime.bundle_image}", f"runtime.image_pull_policy={runtime.image_pull_policy}",
        f"runtime.pod_security={runtime.pod_security}", f"runtime.run_as_user={runtime.run_as_user}",
        f"runtime.run_as_group={runtime.run_as_group}",
        f"proxy.url='{','.join(replica_urls(runtime))}'", f"proxy.upstream='{runtime.proxy_upstream}'",
        "tools.host=0.0.0.0", f"tools.port={runtime.tools_port}", f"tools.advertise_host={tools_host(runtime)}",
        f"run.output_dir={RUNS_MOUNT}",
    ]
    # composed here as the Job will compose it: a typo fails now (exit 2), not in the cluster
    from forge_cli.config.compose import compose as config_compose

    (compose or config_compose)([*overrides, *fixed])
    return ["forge", verb, *overrides, *fixed]


def controller_manifests(runtime: KubernetesRuntime, verb: str, overrides: Sequence[str],
                         runs_size: str = "10Gi", compose: Compose | None = None) -> list[dict[str, Any]]:
    """The claim for run directories, the controller Job (``forge VERB``) and the tool server's Service
    (``compose``: as :func:`controller_args`)."""
    ns = runtime.namespace
    app = {"app.kubernetes.io/name": CONTROLLER_APP, "app.kubernetes.io/part-of": "forge"}
    docs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
         "metadata": {"name": RUNS_CLAIM, "namespace": ns, "labels": {"app.kubernetes.io/part-of": "forge"}},
         "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": runs_size}}}},
        {"apiVersion": "batch/v1", "kind": "Job",
         "metadata": {"name": CONTROLLER_APP, "namespace": ns, "labels": app},
         "spec": {
             "backoffLimit": 0,  # a failed run is looked at, not retried into a second run directory
             "template": {
                 "metadata": {"labels": app},
                 "spec": {
                     "serviceAccountName": CONTROLLER_ACCOUNT,
                     "automountServiceAccountToken": True,  # forge creates the rollout pods through the API
                     "restartPolicy": "Never",
                     "securityContext": FORGE_POD_SECURITY,
                     # forge looks for the harness's bundle in its own $FORGE_HOME before it starts the rollouts'
                     # pods (which copy it from the same image): the bundles image fills that directory first
                     "initContainers": [{
                         "name": "bundles",
                         "image": runtime.bundle_image,
                         "imagePullPolicy": runtime.image_pull_policy,
                         "command": bundle_copy(BUNDLES_MOUNT, "/mnt/harnesses"),
                         "volumeMounts": [{"name": "harnesses", "mountPath": "/mnt/harnesses"}],
                         "securityContext": CONTAINER_SECURITY,
                     }],
                     "containers": [{
                         "name": "forge",
                         "image": runtime.proxy_image,
                         "imagePullPolicy": runtime.image_pull_policy,
                         "command": controller_args(runtime, verb, overrides, compose),
                         "env": [{"name": PROXY_TOKEN_ENV, "valueFrom": {"secretKeyRef": {
                             "name": PROXY_TOKEN_SECRET, "key": "token"}}}],
                         "ports": [{"name": "tools", "containerPort": runtime.tools_port, "protocol": "TCP"}],
                         "volumeMounts": [{"name": "runs", "mountPath": RUNS_MOUNT},
                                          {"name": "harnesses", "mountPath": f"{CONTROLLER_FORGE_HOME}/harnesses"}],
                         "securityContext": CONTAINER_SECURITY,
                     }],
                     "volumes": [{"name": "runs", "persistentVolumeClaim": {"claimName": RUNS_CLAIM}},
                                 {"name": "harnesses", "emptyDir": {}}],
                 },
             },
         }},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": runtime.tools_service, "namespace": ns, "labels": app},
         "spec": {"selector": {"app.kubernetes.io/name": CONTROLLER_APP},
                  "ports": [{"name": "tools", "port": runtime.tools_port, "targetPort": runtime.tools_port,
                             "protocol": "TCP"}]}},
    ]
    return [plain(doc) for doc in docs]
