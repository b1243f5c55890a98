"""``manager: binary``: a program no package registry carries (zeroclaw), handed over by the user
(``forge harness install NAME --binary PATH`` or ``harness.binary_path``): copied into ``lib/`` with a wrapper in
``bin/``."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, ClassVar

from forge_cli.checksums import sha256_file
from forge_cli.errors import UserError
from forge_cli.harness.bundle_paths import binary_fix
from forge_cli.harness.installer import NATIVE_WRAPPER, Installed, Installer, Progress, write_wrapper


class BinaryInstaller(Installer, manager="binary"):
    """A user-provided program: ``binary_path`` (``--binary``), else the config's ``harness.binary_path``."""

    user_provided: ClassVar[bool] = True

    def install(self, bundle: Path, *, offline: bool, binary_path: Path | None, log: Path,
                say: Progress) -> Installed:
        harness = self.harness
        given = binary_path or (Path(harness.binary_path) if harness.binary_path else None)
        if given is None:
            raise UserError(f"{harness.name} is not on any package registry: forge needs its binary from you",
                            fix=binary_fix(harness), exit_code=2)
        source = given.expanduser()
        if not source.exists():
            raise UserError(f"{harness.name} binary {source} does not exist", fix=binary_fix(harness), exit_code=2)
        if not source.is_file():
            raise UserError(f"{harness.name} binary {source} is not a file", fix=binary_fix(harness), exit_code=2)
        if not os.access(source, os.X_OK):
            raise UserError(f"{harness.name} binary {source} is not executable", fix=f"chmod +x {source}",
                            exit_code=2)
        target = bundle / "lib" / harness.entrypoint
        target.parent.mkdir(parents=True)
        shutil.copy2(source, target)
        target.chmod(0o755)
        write_wrapper(bundle / "bin" / harness.entrypoint, NATIVE_WRAPPER.format(
            harness=harness.name, spec=f"user-provided {source.name}", target=f"lib/{harness.entrypoint}",
            path_line=""))
        return Installed([target], {"packages": {str(harness.package.name): str(harness.package.version)}})

    def is_current(self, manifest: dict[str, Any], binary_path: Path | None = None) -> bool:
        """A program given now must be the one the bundle holds."""
        if binary_path is None:
            return super().is_current(manifest, binary_path)
        given = binary_path.expanduser()
        installed = manifest.get("key_files", {}).get(f"lib/{self.harness.entrypoint}")
        return given.is_file() and installed == sha256_file(given)
