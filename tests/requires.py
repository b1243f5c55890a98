"""The one way a test says it needs an installed part: ``requires("vllm")`` in a test or fixture, or
``@pytest.mark.requires("docker", "harness:pi")`` on a test, class or module (tests/conftest.py applies the marker;
the markers ``vllm``, ``docker`` and ``mitm`` imply ``requires("vllm")``, ``requires("docker")`` and
``requires("mitmproxy")``).

Every part is in :data:`PARTS`, named after the ``scripts/setup.sh`` part that installs it where there is one, with
the check of whether it is here and the command that installs it. A missing part that ``make test`` installs
(``scripts/setup.sh all`` and the pi bundle; ``ci=True`` below) skips the test with that command, except under
``CI=true``, where it FAILS the test naming the part and the command: CI cannot go green by skipping what it was
supposed to install. The parts no ``make test`` provides (``ci=False``: a Kubernetes cluster, a GPU, a benchmark
checkout the user points at, the desktop image and the harness bundles only ``make test-e2e`` installs, ...) skip
everywhere, each with its reason in the table.

``FORGE_TEST_MISSING=vllm,docker`` makes the named parts count as missing (how tests/test_requires.py checks this
module, and how to see what CI would say without uninstalling anything).

No other module under tests/ may skip: tests/test_no_bare_skips.py fails on ``pytest.skip``, ``skipif``,
``importorskip`` (and the unittest forms) anywhere else.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
# the harness bundle `make test` installs (FORGE_HARNESSES=pi scripts/setup.sh harnesses); every other bundle is
# installed by `make test-e2e` (scripts/setup.sh harnesses)
CI_HARNESSES = frozenset({"pi"})
BASE_IMAGE = "forge-base:bookworm"
DESKTOP_IMAGE = "forge-desktop:bookworm"
DESKTOP_TOOLS = ("Xvfb", "xterm", "xdpyinfo", "xwininfo", "dbus-launch", "dbus-send", "openbox", "socat", "curl")
DESKTOP_MODULES = ("pyautogui", "Xlib", "PIL")


@dataclass(frozen=True)
class Part:
    name: str
    # None when the part is here, else what is missing (one line)
    missing: Callable[[], str | None]
    # the command that installs it (or what to set)
    install: str
    # True: `make test` installs it, so CI=true turns its absence into a failure
    ci: bool
    # ci=False: why it may be absent even in CI
    absent_reason: str = ""


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def _hidden() -> set[str]:
    return {name.strip() for name in os.environ.get("FORGE_TEST_MISSING", "").split(",") if name.strip()}


# ------------------------------------------------------------------------------------------------- the checks


def _core() -> str | None:
    gone = [m for m in ("torch", "peft", "transformers") if importlib.util.find_spec(m) is None]
    return f"forge's [train] extra is not installed in .venv (no {', '.join(gone)})" if gone else None


def _bubblewrap() -> str | None:
    from forge_cli.runtime import isolation

    found = isolation.probe()
    return None if found.usable else f"local sandboxes cannot be isolated here: {found.reason}"


def _env(name: str, what: str) -> Callable[[], str | None]:
    def check() -> str | None:
        from forge_cli.paths import env_python

        python = env_python(name)
        return None if python.is_file() else f"{what} is not installed (no {python})"

    return check


def _vllm() -> str | None:
    from forge_cli.prerequisites import check_vllm_env

    found = check_vllm_env()
    return None if found.ok else f"forge's vLLM environment is not installed: {found.detail}"


def _mitmproxy() -> str | None:
    from forge_cli.proxy.launcher import mitmdump_path

    path = mitmdump_path()
    return None if path.exists() else f"forge's mitmproxy environment is not installed (no {path})"


def _model() -> str | None:
    from forge_cli.serve.prepare import default_model_dir

    path = default_model_dir()
    return None if (path / "config.json").is_file() else f"the default model is not prepared (no {path}/config.json)"


def _docker_answers() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _image(name: str) -> bool:
    try:
        return subprocess.run(["docker", "image", "inspect", name], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _docker() -> str | None:
    """docker.io installed, dockerd answering and the base image there; what ``scripts/setup.sh docker`` does
    after installing docker.io is done here when needed (dockerd started with scripts/dockerd.sh: tests/runtime
    restarts it; the image built with scripts/base-image.sh, ~1 min)."""
    gone = [tool for tool in ("docker", "dockerd") if shutil.which(tool) is None]
    if gone:
        return f"{', '.join(gone)} not installed"
    if not _docker_answers():
        started = subprocess.run([str(ROOT / "scripts" / "dockerd.sh")], capture_output=True, text=True, timeout=180)
        if started.returncode != 0 or not _docker_answers():
            return f"dockerd does not answer and scripts/dockerd.sh could not start it: {started.stderr.strip()[-300:]}"
    if not _image(BASE_IMAGE):
        built = subprocess.run([str(ROOT / "scripts" / "base-image.sh")], capture_output=True, text=True,
                               timeout=900)
        if built.returncode != 0 or not _image(BASE_IMAGE):
            return f"the {BASE_IMAGE} image is missing and scripts/base-image.sh failed: {built.stderr.strip()[-300:]}"
    return None


def _chromium() -> str | None:
    return None if shutil.which("chromium") else "Debian's chromium is not installed"


def _web() -> str | None:
    from forge_cli.browser import playwright_mcp
    from forge_cli.envs import miniwob

    found = {"chromium": shutil.which("chromium"), "the MiniWoB++ pages": miniwob.package_html(),
             "@playwright/mcp": playwright_mcp.manifest()}
    gone = [what for what, ok in found.items() if not ok]
    return f"{', '.join(gone)} not installed" if gone else None


def _desktop_host() -> str | None:
    gone = [tool for tool in DESKTOP_TOOLS if shutil.which(tool) is None]
    if not Path("/usr/libexec/at-spi-bus-launcher").exists():
        gone.append("at-spi-bus-launcher")
    gone += [f"python module {m}" for m in DESKTOP_MODULES if importlib.util.find_spec(m) is None]
    return f"{', '.join(gone)} not installed" if gone else None


def _desktop() -> str | None:
    if shutil.which("docker") is None or not _docker_answers():
        return "no running dockerd for the desktop image"
    return None if _image(DESKTOP_IMAGE) else f"the {DESKTOP_IMAGE} image is not built"


def _envvars(*names: str) -> Callable[[], str | None]:
    def check() -> str | None:
        unset = [n for n in names if not os.environ.get(n)]
        return f"{', '.join(unset)} not set" if unset else None

    return check


def _gpu() -> str | None:
    from forge_cli.serve.server import gpu_visible

    return None if gpu_visible() else "no GPU on this machine"


def _no_gpu() -> str | None:
    from forge_cli.serve.server import gpu_visible
    from forge_cli.train.verl.checks import gpu_count

    return "this machine has a GPU" if gpu_visible() or gpu_count() > 0 else None


def _no_ffmpeg() -> str | None:
    return "ffmpeg is installed here" if shutil.which("ffmpeg") else None


def _harness(name: str) -> Callable[[], str | None]:
    def check() -> str | None:
        from forge_cli.paths import bundles_dir

        manifest = bundles_dir() / name / "manifest.json"
        return None if manifest.is_file() else f"the {name} harness bundle is not installed (no {manifest})"

    return check


# ------------------------------------------------------------------------------------------------- the table

SETUP_ALL = "scripts/setup.sh all"
PARTS: dict[str, Part] = {p.name: p for p in [
    # what `make test` installs (scripts/setup.sh all, and the pi bundle): missing under CI=true is a failure
    Part("core", _core, "scripts/setup.sh core", ci=True),
    Part("bubblewrap", _bubblewrap, "scripts/setup.sh core (apt-get install -y bubblewrap; user namespaces allowed)",
         ci=True),
    Part("vllm", _vllm, "scripts/setup.sh vllm", ci=True),
    Part("mitmproxy", _mitmproxy, "scripts/setup.sh mitmproxy", ci=True),
    Part("verl", _env("verl", "veRL's environment"), "scripts/setup.sh verl", ci=True),
    Part("model", _model, "scripts/setup.sh model", ci=True),
    Part("docker", _docker, "scripts/setup.sh docker", ci=True),
    Part("chromium", _chromium, "scripts/setup.sh chromium", ci=True),
    Part("web", _web, "scripts/setup.sh web", ci=True),
    Part("osworld", _env("osworld", "OSWorld's environment"), "scripts/setup.sh osworld", ci=True),
    Part("desktop-host", _desktop_host, "scripts/setup.sh osworld (its X tools and pyautogui on this machine)",
         ci=True),
    *[Part(f"harness:{name}", _harness(name), f"FORGE_HARNESSES={name} scripts/setup.sh harnesses", ci=True)
      for name in sorted(CI_HARNESSES)],
    # genuinely absent from `make test`: these skip even under CI=true, each with why
    Part("desktop", _desktop, "scripts/setup.sh desktop", ci=False,
         absent_reason="the desktop image (~2.4 GB, 10-20 min to build) is built by make test-e2e only"),
    Part("kubernetes", _envvars("KUBECONFIG"), "set KUBECONFIG to a cluster (see tests/runtime/conftest.py)",
         ci=False, absent_reason="no Kubernetes cluster runs on forge's CI machines (tests/runtime/kube_fake.py and "
                                 "the recorded API server stand in)"),
    Part("kubernetes-proxy", _envvars("KUBECONFIG", "FORGE_TEST_PROXY_URL", "FORGE_PROXY_TOKEN"),
         "prepare a cluster as tests/runtime/test_kubernetes_cluster.py's docstring says", ci=False,
         absent_reason="no Kubernetes cluster with forge's proxy replicas runs on forge's CI machines"),
    Part("gpu", _gpu, "run on a machine with a GPU", ci=False, absent_reason="forge's CI machines have no GPU"),
    Part("no-gpu", _no_gpu, "run on a machine without a GPU", ci=False,
         absent_reason="checks the message a machine without a GPU gives; a GPU machine cannot show it"),
    Part("no-ffmpeg", _no_ffmpeg, "run where ffmpeg is not installed", ci=False,
         absent_reason="checks the answer of a desktop without ffmpeg; no setup part installs or removes ffmpeg"),
    Part("claweval-checkout", _envvars("FORGE_CLAWEVAL_PATH"), "set FORGE_CLAWEVAL_PATH to a Claw-Eval checkout",
         ci=False, absent_reason="a benchmark checkout the user provides (tests/envs/claweval_tasks stands in)"),
    Part("qwenclawbench-checkout", _envvars("FORGE_QWENCLAWBENCH_PATH"),
         "set FORGE_QWENCLAWBENCH_PATH to a QwenClawBench checkout", ci=False,
         absent_reason="a benchmark checkout the user provides (tests/envs/qwenclawbench_tasks stands in)"),
    Part("osworld-checkout", _envvars("FORGE_OSWORLD_PATH"), "set FORGE_OSWORLD_PATH to a clone of xlang-ai/OSWorld",
         ci=False, absent_reason="a benchmark checkout the user provides (forge's shipped OSWorld tasks stand in)"),
]}


def part(name: str) -> Part:
    """The part called NAME; ``harness:<name>`` for any harness (those outside ``make test``: make test-e2e)."""
    if name in PARTS:
        return PARTS[name]
    if name.startswith("harness:"):
        harness = name.split(":", 1)[1]
        return Part(name, _harness(harness), f"forge harness install {harness} (make test-e2e installs every bundle)",
                    ci=False, absent_reason="only make test-e2e installs this harness bundle (make test installs "
                                            f"{', '.join(sorted(CI_HARNESSES))})")
    raise KeyError(f"tests/requires.py has no part {name!r}: one of {', '.join(PARTS)} or harness:<name>")


@functools.cache
def _missing_cached(name: str) -> str | None:
    return part(name).missing()


# parts whose state tests change while the session runs (dockerd restarts) are checked every time
UNCACHED = frozenset({"docker", "desktop"})


def missing(name: str) -> str | None:
    """None when the part NAME is here, else what is missing."""
    if name in _hidden():
        return "hidden by FORGE_TEST_MISSING"
    found = part(name)
    return found.missing() if name in UNCACHED else _missing_cached(name)


def message(name: str, why: str) -> str:
    found = part(name)
    if found.ci:
        return f"needs {name}: {why}; make test installs it ({SETUP_ALL} plus the pi bundle); fix: {found.install}"
    return f"needs {name}: {why} ({found.absent_reason}); to run it: {found.install}"


def requires(*names: str) -> None:
    """Go on only when every named part is here. Otherwise: a part ``make test`` installs fails the test under
    ``CI=true`` and skips it elsewhere; a part no ``make test`` provides skips it. Each message names the part, what
    is missing and the command that installs it. Works in tests, fixtures and at module level."""
    for name in names:
        why = missing(name)
        if why is None:
            continue
        text = message(name, why)
        if part(name).ci and in_ci():
            pytest.fail(f"CI=true: {text}", pytrace=False)
        pytest.skip(text, allow_module_level=True)


def module(name: str, part_name: str) -> ModuleType:
    """``import NAME`` once ``requires(part_name)`` holds (the form of ``pytest.importorskip`` for a part)."""
    requires(part_name)
    return importlib.import_module(name)


def table() -> str:
    """The parts, one a line, for docs/development.md and `pytest tests/test_requires.py -s`."""
    rows = []
    for found in PARTS.values():
        kind = "make test" if found.ci else f"absent: {found.absent_reason}"
        rows.append(f"{found.name:22s} {kind}; install: {found.install}")
    return "\n".join(rows)
