"""``manager: pypi``: wheels from PyPI installed as plain site-packages with a relocatable launcher
(``forge_cli/harness/pypi.py``; the wheel cache in ``$FORGE_HOME/cache/pip/<harness>`` serves ``--offline``)."""

from __future__ import annotations

from pathlib import Path

from forge_cli.harness import pypi
from forge_cli.harness.installer import Installed, Installer, Progress


class PypiInstaller(Installer, manager="pypi"):
    """Wheels downloaded into forge's cache, installed from there with ``pip install --target``."""

    def install(self, bundle: Path, *, offline: bool, binary_path: Path | None, log: Path,
                say: Progress) -> Installed:
        harness = self.harness
        say(f"installing {' '.join(pypi.spec(harness))} with pip" + (" (offline)" if offline else ""))
        pypi.install(harness, bundle, offline=offline, log=log)
        launcher = pypi.write_launcher(harness, bundle)
        packages = pypi.installed_packages(bundle)
        return Installed([launcher], {"python": pypi.PYTHON_TAG, "packages": packages,
                                      "artifacts": pypi.artifacts(harness, packages)})
