"""``manager: builtin``: forge's own harness, one stdlib Python file shipped in ``forge_cli/remote/sandbox/``
(``react_agent.py``), copied into the bundle and reinstalled from this checkout before every run."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, ClassVar

from forge_cli.checksums import sha256_file
from forge_cli.config.schema import HarnessConfig
from forge_cli.errors import UserError
from forge_cli.harness.installer import Installed, Installer, Progress


def builtin_source(harness: HarnessConfig) -> Path:
    """The shipped file of a builtin harness, by package name (``forge-react`` → ``react_agent.py``), so
    that options derived from it under other names (``--config-dir``) reuse it."""
    name = (harness.package.name or harness.name).removeprefix("forge-")
    return Path(__file__).resolve().parents[2] / "remote" / "sandbox" / f"{name}_agent.py"


class BuiltinInstaller(Installer, manager="builtin"):
    """forge's own agent: ``bin/<entrypoint>`` is the shipped Python file, run with the sandbox's python3."""

    ships_with_forge: ClassVar[bool] = True
    run_prefix: ClassVar[tuple[str, ...]] = ("python3",)

    def install(self, bundle: Path, *, offline: bool, binary_path: Path | None, log: Path,
                say: Progress) -> Installed:
        harness = self.harness
        source = builtin_source(harness)
        if not source.is_file():
            raise UserError(f"forge's builtin harness '{harness.name}' is missing from this installation ({source})",
                            fix="reinstall forge (scripts/setup.sh core) or update the checkout")
        target = bundle / "bin" / harness.entrypoint
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        target.chmod(0o755)
        return Installed([target], {"packages": {str(harness.package.name): str(harness.package.version)}})

    def is_current(self, manifest: dict[str, Any], binary_path: Path | None = None) -> bool:
        """The bundle holds this checkout's file."""
        if not super().is_current(manifest, binary_path):
            return False
        source = builtin_source(self.harness)
        installed = manifest.get("key_files", {}).get(f"bin/{self.harness.entrypoint}")
        return source.is_file() and installed == sha256_file(source)
