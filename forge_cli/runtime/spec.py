"""What a sandbox is made from: one spec every backend understands."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from forge_cli.config.schema import Resources

LABEL_RUN = "forge.run"
# HOME of the harness in every sandbox (the local backend maps it to a directory of its own)
SANDBOX_HOME = "/tmp/forge-home"
LABEL_ROLLOUT = "forge.rollout"
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9_.-]+")


def label_value(text: str) -> str:
    """A string made safe as a docker/Kubernetes label value (<= 63 chars, alnum at both ends)."""
    value = _LABEL_VALUE.sub("-", text)[:63].strip("-_.")
    return value or "x"


@dataclass(frozen=True)
class ProxyEndpoint:
    """How sandboxes reach the capture proxy (the only egress a restricted sandbox keeps)."""

    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


@dataclass(frozen=True)
class SandboxSpec:
    """Everything needed to create one rollout's sandbox, independent of the backend."""

    run_id: str
    rollout_id: str
    # image for docker/kubernetes; local sandboxes ignore it
    image: str
    # working directory of the task inside the sandbox
    workdir: str
    # the only environment variables the sandbox gets (nothing is inherited from the host)
    env: dict[str, str] = field(default_factory=dict)
    # files written before the harness starts: path (absolute, or relative to workdir) -> content
    files: dict[str, str | bytes] = field(default_factory=dict)
    resources: Resources = field(default_factory=Resources)
    # "host", a docker network name, or "proxy-only" (kubernetes NetworkPolicy)
    network: str = "host"
    proxy: ProxyEndpoint | None = None
    # wall-clock deadline of the whole sandbox, in seconds
    timeout_s: int = 600
    # the harness bundle on the host, mounted read-only at bundle_mount (None: no bundle)
    bundle_host_path: str | None = None
    bundle_mount: str = "/opt/forge/harness"
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """Container/Pod name: unique per rollout, DNS-safe."""
        return label_value(f"forge-{self.rollout_id}").lower().replace("_", "-").replace(".", "-")

    @property
    def all_labels(self) -> dict[str, str]:
        return {LABEL_RUN: label_value(self.run_id), LABEL_ROLLOUT: label_value(self.rollout_id), **self.labels}
