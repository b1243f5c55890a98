"""Every pod forge emits complies with the Pod Security "restricted" profile by default (issue 34 item 3).

The sandbox pods (with and without a harness bundle's init container), the proxy StatefulSet's and the controller
Job's templates are checked against the profile's published controls (``tests/k8s/pod_security.py``); the namespace
``forge k8s manifests`` creates enforces the same profile. ``runtime.pod_security=baseline`` (for sandbox images that
must run as root) relaxes only the sandbox pods, only by the non-root controls, and labels the namespace baseline.
The checker itself is shown to catch each control on a planted defect.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from forge_cli.config.schema import KubernetesRuntime
from forge_cli.runtime.k8s_controller import controller_manifests
from forge_cli.runtime.k8s_manifests import PSS_LABEL, cluster_manifests, pod_manifest
from tests.k8s.pod_security import violations
from tests.runtime.test_k8s_schema import RUNTIME, _specs, manifests

POD_KINDS = {"Pod", "StatefulSet", "Job"}


def _pods(runtime: KubernetesRuntime) -> list[dict[str, Any]]:
    docs = [*cluster_manifests(runtime), *controller_manifests(runtime, "rollout", ["+harness=codex"])]
    docs += [pod_manifest(spec, runtime) for spec in _specs()]
    return [d for d in docs if d["kind"] in POD_KINDS]


def test_every_pod_forge_emits_is_restricted_by_default() -> None:
    pods = [d for d in manifests() if d["kind"] in POD_KINDS]
    assert {d["kind"] for d in pods} == POD_KINDS
    assert any(d["kind"] == "Pod" and d["spec"]["initContainers"] for d in pods), "the bundle's init container"
    assert {f"{d['kind']} {d['metadata']['name']}": violations(d) for d in pods} == {
        f"{d['kind']} {d['metadata']['name']}": [] for d in pods}
    namespace = next(d for d in cluster_manifests(RUNTIME) if d["kind"] == "Namespace")
    assert namespace["metadata"]["labels"][PSS_LABEL] == "restricted"
    sandbox = pod_manifest(_specs()[1], RUNTIME)["spec"]["securityContext"]
    assert (sandbox["runAsNonRoot"], sandbox["runAsUser"], sandbox["runAsGroup"]) == (True, 1000, 1000)


def test_baseline_for_images_that_must_run_as_root() -> None:
    runtime = RUNTIME.model_copy(update={"pod_security": "baseline"})
    namespace = next(d for d in cluster_manifests(runtime) if d["kind"] == "Namespace")
    assert namespace["metadata"]["labels"][PSS_LABEL] == "baseline"
    for doc in _pods(runtime):
        assert violations(doc, "baseline") == [], doc["metadata"]["name"]
        found = violations(doc)
        if doc["kind"] == "Pod":  # the sandbox: the image's user, so only the non-root control is not met
            assert found and all(v.startswith("Running as Non-root: ") for v in found), found
            assert "runAsUser" not in doc["spec"]["securityContext"]
        else:  # forge's own image runs as its non-root user either way
            assert found == []


def _container(doc: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = doc["spec"]["containers"][0]
    return container


PLANTED: dict[str, tuple[Callable[[dict[str, Any]], object], str]] = {
    "host network": (lambda d: d["spec"].update(hostNetwork=True), "Host Namespaces"),
    "privileged": (lambda d: _container(d)["securityContext"].update(privileged=True), "Privileged Containers"),
    "SYS_ADMIN": (lambda d: _container(d)["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
                  "Capabilities"),
    "hostPath": (lambda d: d["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/"}}), "HostPath Volumes"),
    "host port": (lambda d: _container(d).update(ports=[{"containerPort": 80, "hostPort": 80}]), "Host Ports"),
    "unconfined seccomp": (lambda d: _container(d)["securityContext"].update(seccompProfile={"type": "Unconfined"}),
                           "Seccomp"),
    "unsafe sysctl": (lambda d: d["spec"]["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}]),
                      "Sysctls"),
    "proc mount": (lambda d: _container(d)["securityContext"].update(procMount="Unmasked"), "/proc Mount Type"),
    "selinux user": (lambda d: d["spec"]["securityContext"].update(seLinuxOptions={"user": "system_u"}), "SELinux"),
    "apparmor": (lambda d: _container(d)["securityContext"].update(appArmorProfile={"type": "Unconfined"}),
                 "AppArmor"),
    "nfs volume": (lambda d: d["spec"]["volumes"].append({"name": "n", "nfs": {"server": "s", "path": "/"}}),
                   "Volume Types"),
    "escalation": (lambda d: _container(d)["securityContext"].pop("allowPrivilegeEscalation"),
                   "Privilege Escalation"),
    "root allowed": (lambda d: d["spec"]["securityContext"].pop("runAsNonRoot"), "Running as Non-root"),
    "uid 0": (lambda d: _container(d)["securityContext"].update(runAsUser=0), "Running as Non-root user"),
    "no seccomp": (lambda d: (d["spec"]["securityContext"].pop("seccompProfile"),
                              _container(d)["securityContext"].pop("seccompProfile")), "Seccomp"),
    "capabilities kept": (lambda d: _container(d)["securityContext"].pop("capabilities"), "Capabilities"),
}


@pytest.mark.parametrize("defect", list(PLANTED))
def test_the_checker_catches_each_control(defect: str) -> None:
    plant, control = PLANTED[defect]
    doc = copy.deepcopy(pod_manifest(_specs()[1], RUNTIME))
    assert violations(doc) == []
    plant(doc)
    assert any(v.startswith(control + ":") for v in violations(doc)), violations(doc)


def test_forges_own_pods_run_as_the_controller_images_user_whatever_the_sandboxes_do() -> None:
    runtime = RUNTIME.model_copy(update={"run_as_user": 2000, "run_as_group": 3000})
    for doc in _pods(runtime):
        context = (doc["spec"] if doc["kind"] == "Pod" else doc["spec"]["template"]["spec"])["securityContext"]
        want = (2000, 3000) if doc["kind"] == "Pod" else (1000, 1000)  # the controller image's user forge
        assert (context["runAsUser"], context["runAsGroup"], context["fsGroup"]) == (want[0], want[1], want[1])
        assert violations(doc) == []
