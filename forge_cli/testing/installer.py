"""The conformance kit of a harness installer (``forge_cli/harness/installer.py``'s ``Installer``).

    problems = check_installer("mine", sample)    # a registered name, or pkg.module:Class
    assert not problems, problems

``sample(scratch)`` is yours: it makes, under the directory ``scratch``, a tiny package your installer installs
**without the network**, and returns it as a :class:`Sample` (the package's fields, its program's name, what the
program prints). :func:`program` writes such a program (``NAME --version`` prints ``NAME VERSION``), to be packed the
way your installer expects (a tarball, a wheel in forge's cache, a file to hand over). While ``sample`` runs and the
checks run, ``FORGE_HOME`` is a fresh directory (forge's caches, where an offline install reads from) and the
harness is named :data:`HARNESS`.

The kit installs the sample through forge's own path (``forge_cli/harness/bundles.py``: ``forge harness install
--offline`` with every HTTP(S) route to the network closed) and checks what forge relies on, each check by name
(:data:`CHECKS`, each runnable alone with ``only``):

- ``registered``: the name finds the installer, a subclass of ``Installer`` that knows its name;
- ``declares``: what forge asks of it is declared with the right types (``ships_with_forge`` and ``user_provided``,
  not both; ``run_prefix`` a tuple of strings);
- ``installs_offline``: the install succeeds offline and ``bin/<entrypoint>`` runs (forge ran it with ``--version``
  or ``--help``) and prints what the sample says;
- ``manifest``: the manifest names the installer, records ``packages`` as ``{name: version}`` and hashes of key files
  that are what the bundle holds;
- ``current``: a second install keeps the bundle (the installer accepts the manifest it just wrote);
- ``relocatable``: the bundle moved elsewhere still runs, with a bare environment (a sandbox mounts it at
  ``/opt/forge/harness``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forge_cli.checksums import sha256_file
from forge_cli.config.schema import HarnessConfig
from forge_cli.harness.bundle_paths import bundle_dir
from forge_cli.harness.bundles import install
from forge_cli.harness.installer import Installer, installer_class
from forge_cli.harness.proc import SYSTEM_PATH

# the name of the harness the kit installs
HARNESS = "forge-kit"
CHECKS = ("registered", "declares", "installs_offline", "manifest", "current", "relocatable")
# every HTTP(S) route to the network fails (npm, pip and urllib honour these)
NO_NETWORK = {name: "http://127.0.0.1:9" for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy",
                                                       "npm_config_proxy", "npm_config_https_proxy")}


@dataclass
class Sample:
    """A tiny package of the installer under test, installable offline.

    ``package``: the harness's ``package`` without ``manager`` (``name``, ``version``, optionally ``extra``,
    ``scripts``); ``entrypoint``: the program the bundle's ``bin/`` holds; ``runtime``: what it needs in the sandbox
    (``native``, ``python``, ``node``); ``binary_path``: the program handed over, for an installer whose harnesses no
    registry carries (``forge harness install --binary``); ``expect``: text the program's first line of ``--version``
    (or ``--help``) output holds."""

    package: dict[str, Any]
    entrypoint: str
    expect: str
    runtime: str = "native"
    binary_path: Path | None = None
    # extra harness fields, if the installer reads any
    harness: dict[str, Any] = field(default_factory=dict)


def program(directory: Path, name: str = "kit-program", version: str = "1.0") -> Path:
    """An executable ``/bin/sh`` program ``directory/name``: ``--version`` prints ``NAME VERSION``, anything else
    ``NAME: ARGS``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(f'#!/bin/sh\nif [ "$1" = --version ]; then echo "{name} {version}"; else echo "{name}: $*"; fi\n')
    path.chmod(0o755)
    return path


@contextlib.contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _declares(cls: type[Installer]) -> list[str]:
    problems = []
    for flag in ("ships_with_forge", "user_provided"):
        if not isinstance(getattr(cls, flag, None), bool):
            problems.append(f"declares: {flag} is {getattr(cls, flag, None)!r}, not True or False")
    if cls.ships_with_forge is True and cls.user_provided is True:
        problems.append("declares: ships_with_forge and user_provided are both set (forge's own program is not "
                        "handed over by the user)")
    prefix = cls.run_prefix
    if not (isinstance(prefix, tuple) and all(isinstance(part, str) and part for part in prefix)):
        problems.append(f"declares: run_prefix is {prefix!r}, not a tuple of strings (() for a program)")
    return problems


def _manifest(manager: str, manifest: dict[str, Any], bundle: Path, harness: HarnessConfig) -> list[str]:
    problems = []
    if manifest.get("manager") != manager:
        problems.append(f"manifest: manager is {manifest.get('manager')!r}, not {manager!r}")
    packages = manifest.get("packages")
    if not (isinstance(packages, dict) and packages
            and all(isinstance(k, str) and isinstance(v, str) for k, v in packages.items())):
        problems.append(f"manifest: packages is {packages!r}, not {{name: version}} of what was installed")
    key_files = manifest.get("key_files", {})
    if f"bin/{harness.entrypoint}" not in key_files:
        problems.append(f"manifest: key_files lacks bin/{harness.entrypoint}")
    for rel, digest in key_files.items():
        path = bundle / rel
        if not path.is_file() or sha256_file(path) != digest:
            problems.append(f"manifest: key file {rel} is not in the bundle as hashed")
    return problems


def _runs(cls: type[Installer], bundle: Path, sample: Sample, scratch: Path) -> list[str]:
    moved = scratch / "elsewhere" / "harness"
    moved.parent.mkdir(parents=True)
    shutil.move(str(bundle), moved)
    home = scratch / "home-of-the-run"
    home.mkdir()
    argv = [*cls.run_prefix, str(moved / "bin" / sample.entrypoint), "--version"]
    try:
        proc = subprocess.run(argv, env={"HOME": str(home), "PATH": SYSTEM_PATH, "LANG": "C.UTF-8"}, cwd=home,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [f"relocatable: the moved bundle's program cannot be run ({exc})"]
    output = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0 or sample.expect not in output:
        return [f"relocatable: the bundle moved to another directory does not run (exit {proc.returncode}: "
                f"{' | '.join(output.splitlines()[-3:])})"]
    return []


def check_installer(manager: str, sample: Callable[[Path], Sample], only: list[str] | None = None) -> list[str]:
    """Problems of the installer registered (or importable) as ``manager``, each ``"<check>: <what>"``; empty when
    it conforms. ``only``: run only these of :data:`CHECKS` (the install itself runs for any but the first two)."""
    wanted = set(only or CHECKS)
    try:
        cls = installer_class(manager)
    except ValueError as exc:
        return [f"registered: {exc}"]
    problems: list[str] = []
    if "registered" in wanted:
        if not (isinstance(cls, type) and issubclass(cls, Installer)):
            problems.append(f"registered: {cls!r} is not a subclass of Installer")
        elif ":" not in manager and cls.manager != manager:
            problems.append(f"registered: found as {manager!r} but its manager is {cls.manager!r}")
    if "declares" in wanted:
        problems += _declares(cls)
    if not wanted & {"installs_offline", "manifest", "current", "relocatable"}:
        return problems
    with tempfile.TemporaryDirectory(prefix="forge-installer-kit-") as tmp:
        scratch = Path(tmp)
        with _environ({"FORGE_HOME": str(scratch / "forge-home")}):
            made = sample(scratch / "source")
            harness = HarnessConfig.model_validate({
                "name": HARNESS, "description": "the installer kit's sample", "runtime": made.runtime,
                "package": {**made.package, "manager": manager}, "wire_api": "chat", "entrypoint": made.entrypoint,
                "command": [made.entrypoint], **made.harness})
            with _environ(NO_NETWORK):
                try:
                    manifest = install(harness, offline=True, binary_path=made.binary_path)
                except Exception as exc:
                    return [*problems, f"installs_offline: the sample's offline install failed: "
                                       f"{type(exc).__name__}: {exc}"]
                if "installs_offline" in wanted and made.expect not in str(manifest.get("version_output")):
                    problems.append(f"installs_offline: bin/{made.entrypoint} printed "
                                    f"{manifest.get('version_output')!r}, not {made.expect!r}")
                bundle = bundle_dir(harness)
                if "manifest" in wanted:
                    problems += _manifest(manager, manifest, bundle, harness)
                if "current" in wanted:
                    again = install(harness, offline=True, binary_path=made.binary_path)
                    if not again.get("already_installed"):
                        problems.append("current: a second install rebuilt the bundle (is_current refuses the "
                                        "manifest the installer just wrote)")
            if "relocatable" in wanted:
                problems += _runs(cls, bundle, made, scratch)
    return problems
