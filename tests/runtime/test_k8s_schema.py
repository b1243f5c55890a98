"""Every object forge gives Kubernetes, validated against the API server's own OpenAPI schemas.

``kubernetes-validate`` (PyPI) ships the schemas of each Kubernetes release; each manifest forge emits (``forge k8s
manifests``: Namespace, ServiceAccounts, Roles, RoleBinding, the proxy StatefulSet and Services; the controller's
PersistentVolumeClaim, Job and Service; each sandbox's Pod and NetworkPolicy, with and without a harness bundle,
with proxy replicas) is validated strictly (unknown fields fail) against Kubernetes 1.30 and the newest release the
package ships: quantities, label values, DNS names and field types as the API server would check them. The client
models' round trip (``tests/runtime/test_kubernetes.py``) drops unknown fields silently; this does not.
"""

from __future__ import annotations

import re
from typing import Any

import kubernetes_validate
import pytest

from forge_cli.config.schema import KubernetesRuntime, Resources
from forge_cli.runtime.k8s_controller import controller_manifests
from forge_cli.runtime.k8s_manifests import cluster_manifests, network_policy, pod_manifest
from forge_cli.runtime.spec import ProxyEndpoint, SandboxSpec

VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]
RUNTIME = KubernetesRuntime(kind="kubernetes", description="schema", namespace="forge")


def _specs() -> list[SandboxSpec]:
    common: dict[str, Any] = {"run_id": "run-20261206-120000-ab12", "image": "forge-base:bookworm",
                              "workdir": "/work", "timeout_s": 900}
    return [
        SandboxSpec(rollout_id="run-20261206-120000-ab12-fix_script_fix_typo_0-s0-0", **common),
        SandboxSpec(rollout_id="run-20261206-120000-ab12-answer-max-score-3-0-6d83fa", network="proxy-only",
                    proxy=ProxyEndpoint("forge-proxy", 8800), env={"OPENAI_API_KEY": "k"},
                    resources=Resources(cpus=1.5, memory="2Gi", pids=512),
                    bundle_host_path="/root/.cache/forge/harnesses/codex", **common),
        # a long task id with capitals and underscores (Harbor's, Claw-Eval's): names and labels still valid
        SandboxSpec(rollout_id="run-20261206-120000-ab12-" + "Very_Long_Task_Name." * 8 + "-s3-1", **common),
    ]


def manifests() -> list[dict[str, Any]]:
    """Every object forge emits, in the variants that change their shape."""
    docs = [*cluster_manifests(RUNTIME), *cluster_manifests(RUNTIME.model_copy(update={"proxy_replicas": 3})),
            *controller_manifests(RUNTIME, "rollout", ["+harness=codex"]), *controller_manifests(RUNTIME, "eval", [])]
    for spec in _specs():
        docs += [pod_manifest(spec, RUNTIME), network_policy(spec, RUNTIME)]
    return docs


def test_every_kind_forge_emits_is_covered() -> None:
    assert {d["kind"] for d in manifests()} == {"Namespace", "ServiceAccount", "Role", "RoleBinding", "StatefulSet",
                                                "Service", "PersistentVolumeClaim", "Job", "Pod", "NetworkPolicy"}


@pytest.mark.parametrize("version", VERSIONS)
def test_manifests_are_valid_against_the_api_schema(version: str) -> None:
    problems = []
    for doc in manifests():
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            problems.append(f"{doc['kind']} {doc['metadata'].get('name')}: {error.message} at "
                            f"{'.'.join(str(p) for p in error.path)}")
    assert problems == [], "\n".join(problems)


# apimachinery's syntax rules, which the OpenAPI schema leaves to the API server's validation
QUANTITY = re.compile(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(([KMGTPE]i)|[numkMGTPE]|[eE][+-]?[0-9]+)?$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def _subdomain(name: str) -> bool:
    return len(name) <= 253 and all(DNS_LABEL.match(part) for part in name.split("."))


def _label_problems(labels: dict[str, str], where: str) -> list[str]:
    out = []
    for key, value in labels.items():
        prefix, _, name = key.rpartition("/")
        if (prefix and not _subdomain(prefix)) or len(name) > 63 or not LABEL_NAME.match(name):
            out.append(f"{where}: label key {key!r}")
        if len(value) > 63 or not LABEL_VALUE.match(value):
            out.append(f"{where}: label value {value!r} of {key!r}")
    return out


def _walk(node: Any, path: str, out: list[str]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{path}.{key}"
            if key in ("labels", "matchLabels") and isinstance(value, dict):
                out += _label_problems(value, here)
            elif key in ("limits", "requests") and isinstance(value, dict):
                out += [f"{here}.{k}: quantity {v!r}" for k, v in value.items() if not QUANTITY.match(str(v))]
            elif key == "containers" or key == "initContainers":
                out += [f"{here}: container name {c['name']!r}" for c in value
                        if len(c["name"]) > 63 or not DNS_LABEL.match(c["name"])]
            elif key == "ports" and isinstance(value, list):
                out += [f"{here}: port name {p['name']!r}" for p in value
                        if "name" in p and (len(p["name"]) > 15 or not DNS_LABEL.match(p["name"]))]
            _walk(value, here, out)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            _walk(item, f"{path}[{i}]", out)


def test_names_labels_and_quantities_follow_the_api_servers_rules() -> None:
    problems: list[str] = []
    for doc in manifests():
        name, kind = doc["metadata"]["name"], doc["kind"]
        # Services and Namespaces take DNS-1035 / DNS-1123 labels; the others DNS-1123 subdomains
        ok = (len(name) <= 63 and DNS_1035.match(name) if kind == "Service" else
              len(name) <= 63 and DNS_LABEL.match(name) if kind == "Namespace" else _subdomain(name))
        if not ok:
            problems.append(f"{kind} name {name!r}")
        _walk(doc, kind, problems)
    assert problems == [], "\n".join(problems)
    # the rules themselves: what the API server refuses is refused here
    assert not QUANTITY.match("1 GB") and QUANTITY.match("500m") and QUANTITY.match(str(1024**3))
    assert _label_problems({"forge.run": "x" * 64}, "t") and not _label_problems({"forge.run": "run-1_a.b"}, "t")
