"""Where an installed harness bundle lives on the host (layout shared by install and plans).

A bundle is a self-contained directory ``$FORGE_HOME/harnesses/<name>/`` holding ``bin/<entrypoint>``
(runnable with only the bundle mounted), the runtime it needs, and ``manifest.json`` (versions,
sizes, sha256) written last by ``forge harness install``.
"""

from __future__ import annotations

from pathlib import Path

from forge_cli.config.schema import HarnessConfig
from forge_cli.paths import bundles_dir


def bundle_dir(harness: HarnessConfig) -> Path:
    return bundles_dir() / harness.name


def manifest_path(harness: HarnessConfig) -> Path:
    return bundle_dir(harness) / "manifest.json"


def is_installed(harness: HarnessConfig) -> bool:
    return manifest_path(harness).is_file()


def binary_fix(harness: HarnessConfig) -> str:
    """How to hand forge the program of a harness that no package registry carries (zeroclaw)."""
    return (f"download the {harness.entrypoint} binary from its project's releases, then run "
            f"`forge harness install {harness.name} --binary PATH` once, or add harness.binary_path=PATH to the run")
