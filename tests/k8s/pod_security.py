"""The Pod Security Standards' baseline and restricted profiles, control by control, as Kubernetes publishes them
(https://kubernetes.io/docs/concepts/security/pod-security-standards/, the policy of v1.30 and later): what the
``PodSecurity`` admission controller of a namespace labelled ``pod-security.kubernetes.io/enforce`` checks.

:func:`violations` gives each control a pod spec breaks, as ``"control: where"``; ``containers[*]`` covers the init
and ephemeral containers too.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes"}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}
SECCOMP_TYPES = {"RuntimeDefault", "Localhost"}


def pod_spec(doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The pod spec and annotations of a Pod or of a workload's pod template."""
    if doc["kind"] == "Pod":
        return doc["spec"], doc["metadata"].get("annotations", {})
    template = doc["spec"]["template"]
    return template["spec"], template.get("metadata", {}).get("annotations", {})


def _containers(spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(field) or []:
            yield f"{field}[{container.get('name')}]", container


def _baseline(spec: dict[str, Any], annotations: dict[str, str]) -> Iterator[str]:
    pod = spec.get("securityContext") or {}
    if (pod.get("windowsOptions") or {}).get("hostProcess"):
        yield "HostProcess: securityContext.windowsOptions.hostProcess"
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            yield f"Host Namespaces: {field}"
    for volume in spec.get("volumes") or []:
        if "hostPath" in volume:
            yield f"HostPath Volumes: volumes[{volume.get('name')}]"
    contexts = [("securityContext", pod)]
    for where, container in _containers(spec):
        context = container.get("securityContext") or {}
        contexts.append((f"{where}.securityContext", context))
        if (context.get("windowsOptions") or {}).get("hostProcess"):
            yield f"HostProcess: {where}"
        if context.get("privileged"):
            yield f"Privileged Containers: {where}"
        added = set((context.get("capabilities") or {}).get("add") or [])
        if added - BASELINE_CAPABILITIES:
            yield f"Capabilities: {where} adds {sorted(added - BASELINE_CAPABILITIES)}"
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                yield f"Host Ports: {where}"
        if context.get("procMount", "Default") != "Default":
            yield f"/proc Mount Type: {where}"
    for where, context in contexts:
        apparmor = (context.get("appArmorProfile") or {}).get("type")
        if apparmor not in (None, "RuntimeDefault", "Localhost"):
            yield f"AppArmor: {where}.appArmorProfile"
        selinux = context.get("seLinuxOptions") or {}
        if selinux.get("type", "") not in SELINUX_TYPES or selinux.get("user") or selinux.get("role"):
            yield f"SELinux: {where}.seLinuxOptions"
        if (context.get("seccompProfile") or {}).get("type") == "Unconfined":
            yield f"Seccomp: {where}.seccompProfile Unconfined"
    for key, value in annotations.items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
                value == "runtime/default" or value.startswith("localhost/")):
            yield f"AppArmor: annotation {key}"
    for sysctl in pod.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            yield f"Sysctls: {sysctl.get('name')}"


def _restricted(spec: dict[str, Any]) -> Iterator[str]:
    pod = spec.get("securityContext") or {}
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            yield f"Volume Types: volumes[{volume.get('name')}] is {sorted(kinds - RESTRICTED_VOLUMES)}"
    if pod.get("runAsUser") == 0:
        yield "Running as Non-root user: securityContext.runAsUser 0"
    pod_seccomp = (pod.get("seccompProfile") or {}).get("type")
    if pod_seccomp is not None and pod_seccomp not in SECCOMP_TYPES:
        yield f"Seccomp: securityContext.seccompProfile {pod_seccomp}"
    for where, container in _containers(spec):
        context = container.get("securityContext") or {}
        if context.get("allowPrivilegeEscalation") is not False:
            yield f"Privilege Escalation: {where} does not set allowPrivilegeEscalation false"
        non_root = context.get("runAsNonRoot")
        if non_root is False or (non_root is None and pod.get("runAsNonRoot") is not True):
            yield f"Running as Non-root: {where} (neither it nor the pod sets runAsNonRoot true)"
        if context.get("runAsUser") == 0:
            yield f"Running as Non-root user: {where} runAsUser 0"
        seccomp = (context.get("seccompProfile") or {}).get("type")
        if (seccomp is None and pod_seccomp not in SECCOMP_TYPES) or (seccomp is not None
                                                                     and seccomp not in SECCOMP_TYPES):
            yield f"Seccomp: {where} (neither it nor the pod sets RuntimeDefault or Localhost)"
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            yield f"Capabilities: {where} does not drop ALL"
        if set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
            yield f"Capabilities: {where} adds more than NET_BIND_SERVICE"


def violations(doc: dict[str, Any], profile: str = "restricted") -> list[str]:
    """Every control of ``profile`` ("baseline" or "restricted", which includes baseline) that the pod (template)
    of ``doc`` breaks."""
    spec, annotations = pod_spec(doc)
    found = list(_baseline(spec, annotations))
    if profile == "restricted":
        found += _restricted(spec)
    return found
