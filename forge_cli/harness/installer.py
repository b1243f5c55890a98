"""Harness installers: how a harness's package becomes a bundle (``harness.package.manager``).

A harness YAML names its installer in ``package.manager``; ``forge harness install`` (``forge_cli/harness/bundles.py``)
builds the bundle in a temporary directory with it, then adds what every bundle has (exec bits, hard links for
duplicates, the check that ``bin/<entrypoint>`` runs, ``manifest.json``) and renames it into place.

To add one, subclass :class:`Installer` with ``manager="<name>"`` in a module forge finds
(``forge_cli/harness/installers/*.py`` for forge's own, the entry-point group ``forge.harness_installers`` for a
package's, ``pkg.module:Class`` as the manager for a user's own; :mod:`forge_cli.plugins`) and write
:meth:`Installer.install`. ``forge_cli.testing.installer`` is the conformance kit an installer passes. forge's:
``builtin`` (its own agent, from this checkout), ``npm``, ``pypi`` and ``binary`` (a program the user hands over).

What the rest of forge asks of an installer is declared here, never by comparing names: whether the harness ships
with forge (reinstalled from the checkout before every run, always "installed"), whether no registry carries it (the
user provides the program: ``harness.binary_path`` or ``--binary``), and the command prefix that runs its
``bin/<entrypoint>``.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from forge_cli.config.schema import HarnessConfig
from forge_cli.errors import UserError
from forge_cli.plugins import Registry

Progress = Callable[[str], None]

# the manifest keys forge itself writes (bundles.py): an installer's fields may not take these
MANIFEST_KEYS = frozenset({
    "schema", "name", "manager", "package", "version", "extras", "runtime", "entrypoint", "forge_version",
    "exec_bits_fixed", "deduplicated_bytes", "version_output", "key_files", "file_count", "size_bytes", "offline",
    "install_seconds", "installed_at", "already_installed",
})

NATIVE_WRAPPER = '''\
#!/bin/sh
# forge bundle {harness}: {spec} (native program); paths are relative to this script
d=$(dirname "$0")
{path_line}exec "$d/../{target}" "$@"
'''


def write_wrapper(path: Path, text: str) -> None:
    """Write an executable ``bin/`` wrapper (a ``/bin/sh`` script that finds the bundle relative to itself)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


@dataclass
class Installed:
    """What an installer put into the bundle: the files whose sha256 the manifest records (``bin/<entrypoint>`` is
    added by forge), and the manifest fields it adds (JSON values: ``packages`` ``{name: version}``, the runtime it
    carries, the artifacts it installed from)."""

    key_files: list[Path] = field(default_factory=list)
    manifest: dict[str, Any] = field(default_factory=dict)


class Installer(abc.ABC):
    """Builds one harness's bundle from its package (made with the harness's config).

    :meth:`install` fills an empty bundle directory so that ``bin/<entrypoint>`` runs with only the bundle mounted,
    wherever it is mounted (no absolute path of the build directory in it), and offline when ``offline`` is set (from
    forge's caches under ``$FORGE_HOME``, or an error saying to run it once online). :meth:`is_current` says whether
    an installed bundle's manifest is still what the config asks for (forge has already compared the version, the
    extra packages and the layout's schema).
    """

    manager: ClassVar[str] = ""
    # forge's own program: reinstalled from this checkout before every run, and never "not installed"
    ships_with_forge: ClassVar[bool] = False
    # no package registry carries it: the user hands forge the program (harness.binary_path, or --binary)
    user_provided: ClassVar[bool] = False
    # what runs bin/<entrypoint> (before its path): () for a program, ("python3",) for a Python file
    run_prefix: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, manager: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if manager:
            cls.manager = manager
            INSTALLERS.add(manager, cls)

    def __init__(self, harness: HarnessConfig) -> None:
        self.harness = harness

    @abc.abstractmethod
    def install(self, bundle: Path, *, offline: bool, binary_path: Path | None, log: Path,
                say: Progress) -> Installed:
        """Install the harness's package into ``bundle`` (an empty directory, renamed into place afterwards): at
        least ``bin/<entrypoint>``. Commands' output goes to ``log``; ``say`` reports progress; ``binary_path`` is
        the program a user gave (``--binary``), for an installer that takes one. A problem the user can fix is a
        :class:`~forge_cli.errors.UserError`."""

    def is_current(self, manifest: dict[str, Any], binary_path: Path | None = None) -> bool:
        """Whether the installed bundle (its ``manifest``) is what the config asks for; ``binary_path`` as for
        :meth:`install`. The default: a node harness's bundle carries the Node runtime forge pins."""
        node = manifest.get("node", {})
        if self.harness.runtime != "node":
            return True
        from forge_cli.harness import node_runtime  # lazy: it imports tarfile; only a node harness's check needs it

        return bool(node.get("version") == node_runtime.NODE_VERSION)


INSTALLERS: Registry[type[Installer]] = Registry("harness installer", Installer, "forge.harness_installers",
                                                 own="harness/installers/*.py")


def installer_class(manager: str) -> type[Installer]:
    """The installer registered as ``manager`` (ValueError naming the registered ones when there is none)."""
    return INSTALLERS.get(manager)


def installer_for(harness: HarnessConfig) -> Installer:
    """The installer of ``harness`` (its ``package.manager``), made for it; a UserError (exit 2) when no installer
    has that name."""
    try:
        return installer_class(harness.package.manager)(harness)
    except ValueError as exc:
        raise UserError(f"harness '{harness.name}': package.manager: {exc}",
                        fix="name a registered installer in the harness's YAML", exit_code=2) from None
