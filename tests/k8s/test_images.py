"""The images the cluster path pulls, built from this checkout and run as a restricted pod runs them (issue 34 item 2).

``forge image build --builtin controller`` (``runtime.proxy_image``) and ``--builtin bundles``
(``runtime.bundle_image``) are built through the CLI; then each container forge's manifests describe is run on
dockerd with the command, mounts and user the manifest gives it (uid 1000, no capability, no privilege escalation,
an emptyDir as a fresh volume every user may write): the sandbox pod's init container fills the bundle that pi then
runs from; the controller Job's init container fills forge's ``$FORGE_HOME/harnesses`` and the Job's own command
composes a pi run (``--dry-run``: no cluster here); the proxy StatefulSet's command serves its health endpoint.
make test-e2e (the controller image: 1-3 minutes; the bundles image with pi: ~30 s).
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forge_cli.config.schema import KubernetesRuntime
from forge_cli.ports import free_port
from forge_cli.runtime.k8s_controller import controller_manifests
from forge_cli.runtime.k8s_manifests import cluster_manifests, pod_manifest
from forge_cli.runtime.spec import SandboxSpec
from tests.helpers import fake_upstream, forge

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.requires("docker", "harness:pi", "mitmproxy")]
RUNTIME = KubernetesRuntime(kind="kubernetes", description="images")
TOKEN = "forge-test-admin-token-0123456789"  # the Secret's token the proxy's --admin-token-env reads
# a restricted pod's container: its user, no capability, no privilege escalation
RESTRICTED = ["--user", f"{RUNTIME.run_as_user}:{RUNTIME.run_as_group}", "--cap-drop", "ALL",
              "--security-opt", "no-new-privileges"]


def docker(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def images() -> None:
    for args in (["--builtin", "controller"], ["--builtin", "bundles", "--harness", "pi"]):
        built = forge("image", "build", *args, timeout=1200)
        assert built.returncode == 0, built.stderr[-3000:] + built.stdout[-3000:]


@pytest.fixture
def empty_dir() -> Iterator[str]:
    """A docker volume as Kubernetes makes an emptyDir: empty, writable for every user."""
    name = f"forge-test-{uuid.uuid4().hex[:10]}"
    assert docker("volume", "create", name).returncode == 0
    try:
        assert docker("run", "--rm", "-v", f"{name}:/v", "forge-base:bookworm", "chmod", "0777", "/v").returncode == 0
        yield name
    finally:
        docker("volume", "rm", "-f", name)


def run_container(container: dict[str, Any], volumes: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    """``container`` of a manifest as its pod runs it: its image, command and mounts (``volumes``: volume name in
    the manifest -> docker volume), as the restricted user."""
    mounts = [f"{volumes[m['name']]}:{m['mountPath']}{':ro' if m.get('readOnly') else ''}"
              for m in container.get("volumeMounts", []) if m["name"] in volumes]
    return docker("run", "--rm", *RESTRICTED, *(a for m in mounts for a in ("-v", m)), *extra, container["image"],
                  *container["command"])


def test_the_bundles_image_fills_a_sandbox_pod(images: None, empty_dir: str) -> None:
    spec = SandboxSpec(run_id="r", rollout_id="r-0", image="forge-base:bookworm", workdir="/work",
                       bundle_host_path="/somewhere/harnesses/pi")
    pod = pod_manifest(spec, RUNTIME)["spec"]
    copied = run_container(pod["initContainers"][0], {"harness-bundle": empty_dir})
    assert copied.returncode == 0, copied.stderr
    sandbox = {**pod["containers"][0], "command": ["/opt/forge/harness/bin/pi", "--version"]}
    ran = run_container(sandbox, {"harness-bundle": empty_dir})
    assert ran.returncode == 0 and ran.stdout.strip() == "1.6.0", ran.stderr


def test_the_controller_job_finds_the_bundles_and_composes_a_run(images: None, empty_dir: str,
                                                                 tmp_path: Path) -> None:
    job = next(d for d in controller_manifests(RUNTIME, "rollout", ["+harness=pi"]) if d["kind"] == "Job")
    pod = job["spec"]["template"]["spec"]
    copied = run_container(pod["initContainers"][0], {"harnesses": empty_dir})
    assert copied.returncode == 0, copied.stderr
    runs = tmp_path / "runs"
    runs.mkdir(mode=0o777)
    runs.chmod(0o777)
    container = {**pod["containers"][0], "command": [*pod["containers"][0]["command"], "--dry-run"]}
    planned = run_container(container, {"harnesses": empty_dir}, "-v", f"{runs}:/runs",
                            "-e", f"FORGE_PROXY_TOKEN={TOKEN}", "-e", "COLUMNS=200")
    assert planned.returncode == 0, planned.stderr[-3000:]
    assert "harness bundle: npm:@earendil-works/pi-coding-agent@1.6.0 at /home/forge/.cache/forge/harnesses/pi" in \
        planned.stdout and "(installed)" in planned.stdout, planned.stdout[:3000]


@pytest.fixture
def upstream() -> Iterator[str]:
    with fake_upstream() as url:
        yield url


def test_the_proxy_statefulset_serves(images: None, upstream: str) -> None:
    template = next(d for d in cluster_manifests(RUNTIME) if d["kind"] == "StatefulSet")["spec"]["template"]["spec"]
    container = template["containers"][0]
    command = list(container["command"])
    port = free_port()
    # its own arguments, but on loopback (a test binds nothing else) and this test's free port and upstream
    command[command.index("--host") + 1] = "127.0.0.1"
    command[command.index("--port") + 1] = str(port)
    command[command.index("--upstream") + 1] = upstream
    name = f"forge-test-proxy-{uuid.uuid4().hex[:8]}"
    started = docker("run", "-d", "--name", name, "--network", "host", *RESTRICTED,
                     "-e", f"FORGE_PROXY_TOKEN={TOKEN}", container["image"], *command)
    assert started.returncode == 0, started.stderr
    try:
        deadline, health = time.monotonic() + 90, None
        while time.monotonic() < deadline and health is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/forge/v1/health", timeout=5) as answer:
                    health = json.loads(answer.read())
            except OSError:
                time.sleep(1)
        assert health is not None, docker("logs", name).stdout[-3000:] + docker("logs", name).stderr[-3000:]
        assert health.get("ok") is True or health.get("status") == "ok", health
    finally:
        docker("rm", "-f", name)
