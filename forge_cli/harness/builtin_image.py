"""The harness bundles image of the cluster path (``forge image build --builtin bundles``, tag
``forge-harness-bundles:latest``, ``runtime.bundle_image``): every installed bundle (or those ``--harness`` names) at
``/bundles/<name>/``, which a sandbox pod's init container copies into the pod (``k8s_manifests.pod_manifest``) and
the controller Job's into forge's own ``$FORGE_HOME/harnesses``.

The bundles are hard-linked into the build context (copied where the file system does not allow it), so building
costs what dockerd's copy costs; a file the pods' non-root user could not read (or run) is copied instead and
made readable in the copy, never in ``$FORGE_HOME``.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path

from forge_cli.errors import UserError
from forge_cli.paths import bundles_dir
from forge_cli.runtime.images import BuiltinImage, Echo
from forge_cli.runtime.k8s_manifests import BUNDLES_MOUNT

DOCKERFILE = f"""\
FROM forge-base:bookworm
COPY bundles {BUNDLES_MOUNT}
"""


def installed_bundles() -> list[str]:
    """The harness bundles installed in ``$FORGE_HOME/harnesses`` (a manifest written last marks one complete)."""
    root = bundles_dir()
    return sorted(p.parent.name for p in root.glob("*/manifest.json")) if root.is_dir() else []


def _link_or_copy(source: str, target: str) -> None:
    mode = os.stat(source).st_mode
    if mode & stat.S_IROTH and not (mode & stat.S_IXUSR and not mode & stat.S_IXOTH):
        try:
            os.link(source, target)
            return
        except OSError:
            pass
    shutil.copy2(source, target)  # readable (and runnable where its owner may run it) by any user in the image
    os.chmod(target, mode | stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
             | ((stat.S_IXGRP | stat.S_IXOTH) if mode & stat.S_IXUSR else 0))


class BundlesImage(BuiltinImage, name="bundles"):
    tag = "forge-harness-bundles:latest"
    summary = ("the installed harness bundles (or --harness NAME ...) for the sandbox pods' init containers "
               "(runtime.bundle_image)")
    takes_harnesses = True

    def __init__(self, harnesses: Sequence[str] = ()) -> None:
        super().__init__(harnesses)
        installed = installed_bundles()
        missing = [n for n in self.harnesses if n not in installed]
        if missing:
            raise UserError(f"harness bundle(s) not installed: {', '.join(missing)}",
                            fix=f"forge harness install {' '.join(missing)}", exit_code=2)
        if not installed:
            raise UserError("no harness bundle is installed", fix="forge harness install NAME (e.g. pi)", exit_code=2)
        self.harnesses = self.harnesses or installed

    def prepare(self, context: Path, echo: Echo | None) -> Path:
        for name in self.harnesses:
            if echo is not None:
                echo(f"adding the {name} bundle")
            target = context / "bundles" / name
            shutil.copytree(bundles_dir() / name, target, symlinks=True, copy_function=_link_or_copy)
            for directory, _dirs, _files in os.walk(target):
                os.chmod(directory, os.stat(directory).st_mode | 0o555)  # the context's own directories
        dockerfile = context / "Dockerfile"
        dockerfile.write_text(DOCKERFILE)
        return dockerfile
