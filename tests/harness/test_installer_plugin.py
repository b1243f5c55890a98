"""Harness installers are plugins: forge's own that run offline pass ``forge_cli.testing.installer`` (the kit), one
defined in a package of its own (release tarballs) is found by a dotted path or its entry point, installs a harness
from the command line and passes the kit, and three copies with one planted defect each fail the check they break;
a manager no installer has is a configuration error naming the registered ones.

No test here reaches the network: the kit installs offline (npm's path needs the registry and is covered by
``tests/harness/test_install.py``)."""

from __future__ import annotations

import base64
import hashlib
import json
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from forge_cli.envs.resolve import compose_resolved
from forge_cli.errors import ConfigError, UserError
from forge_cli.harness.bundles import load_harness
from forge_cli.harness.installer import INSTALLERS
from forge_cli.paths import configs_dir, forge_home
from forge_cli.testing.installer import HARNESS, Sample, check_installer, program
from tests.helpers import forge, temporary_package

PLUGIN = '''
import shutil
import tarfile
import urllib.request

from forge_cli.errors import UserError
from forge_cli.harness.installer import NATIVE_WRAPPER, Installed, Installer, write_wrapper
from forge_cli.paths import forge_home


class TarballInstaller(Installer, manager="tarball"):
    """A program from a release tarball: package.name is its URL (https:// or file://), the entrypoint at its top;
    kept in $FORGE_HOME/cache/tarballs, from where an offline install takes it."""

    def install(self, bundle, *, offline, binary_path, log, say):
        harness = self.harness
        url = str(harness.package.name)
        cached = forge_home() / "cache" / "tarballs" / f"{harness.name}-{harness.package.version}.tar.gz"
        if not cached.is_file():
            if offline and not url.startswith("file://"):
                raise UserError(f"{url} is not in forge's cache", fix="install once without --offline")
            cached.parent.mkdir(parents=True, exist_ok=True)
            with urllib.request.urlopen(url) as answer, cached.open("wb") as out:
                shutil.copyfileobj(answer, out)
        with tarfile.open(cached) as archive:
            archive.extractall(bundle / "lib", filter="data")
        target = bundle / "lib" / harness.entrypoint
        write_wrapper(bundle / "bin" / harness.entrypoint, NATIVE_WRAPPER.format(
            harness=harness.name, spec=url, target=f"lib/{harness.entrypoint}", path_line=""))
        return Installed([target], {"packages": {url: str(harness.package.version)}})
'''

DEFECTS = {
    # the wrapper names the program by the absolute path it was built at
    "relocatable": ("        return Installed(",
                    "        wrapper = bundle / 'bin' / harness.entrypoint\n"
                    "        wrapper.write_text(f'#!/bin/sh\\nexec {target.resolve()} \"$@\"\\n')\n"
                    "        return Installed("),
    # refuses the bundle it just wrote: every install rebuilds it
    "current": ("    def install(", "    def is_current(self, manifest, binary_path=None):\n        return False\n\n"
                                   "    def install("),
    "declares": ('manager="tarball"):\n', 'manager="tarball"):\n    run_prefix = "sh"\n'),
}


def _tarball(scratch: Path) -> Path:
    tool = program(scratch / "files", "kit-tool", "2.0")
    archive = scratch / "kit-tool-2.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tool, arcname="kit-tool")
    return archive


def tarball_sample(scratch: Path) -> Sample:
    return Sample({"name": _tarball(scratch).as_uri(), "version": "2.0"}, "kit-tool", "kit-tool 2.0")


def _wheel(directory: Path, name: str = "kitpkg", version: str = "1.0") -> None:
    """A wheel by hand (no build tool, no network): module ``name`` whose console script ``name`` prints its
    version."""
    info = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": f"def main():\n    print('{name} {version}')\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: forge-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
             f"{info}/entry_points.txt": f"[console_scripts]\n{name} = {name}:main\n"}
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    directory.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(directory / f"{name}-{version}-py3-none-any.whl", "w") as wheel:
        for path, text in files.items():
            wheel.writestr(path, text)


def builtin_sample(scratch: Path) -> Sample:
    package = yaml.safe_load((configs_dir() / "harness" / "react.yaml").read_text())["package"]
    return Sample({"name": package["name"], "version": package["version"]}, "forge-react", "forge-react",
                  runtime="python")


def binary_sample(scratch: Path) -> Sample:
    return Sample({"name": "kit-program", "version": "1.0"}, "kit-program", "kit-program 1.0",
                  binary_path=program(scratch))


def pypi_sample(scratch: Path) -> Sample:
    _wheel(forge_home() / "cache" / "pip" / HARNESS)  # forge's wheel cache, where an offline install looks
    return Sample({"name": "kitpkg", "version": "1.0"}, "kitpkg", "kitpkg 1.0", runtime="python")


@pytest.mark.parametrize("manager, sample", [("builtin", builtin_sample), ("binary", binary_sample),
                                             ("pypi", pypi_sample)], ids=["builtin", "binary", "pypi"])
def test_forges_installers_pass_the_kit_offline(manager: str, sample: object) -> None:
    assert check_installer(manager, sample) == []  # type: ignore[arg-type]


# the plugin named by a dotted path (a user's own): imported on the first lookup, when it registers by name
DOTTED = "tarball_installer.plugin:TarballInstaller"


@pytest.fixture
def write_plugin(tmp_path: Path) -> Iterator[Callable[[str], object]]:
    """Writes the source of ``tarball_installer.plugin`` (a package of its own on ``sys.path``, not imported yet);
    the installer it registers is forgotten afterwards."""
    with temporary_package(tmp_path, "tarball_installer") as package:
        yield (package / "plugin.py").write_text
    INSTALLERS.remove("tarball")


def test_a_packages_installer_passes_the_kit(write_plugin: Callable[[str], object]) -> None:
    write_plugin(PLUGIN)
    assert check_installer(DOTTED, tarball_sample) == []
    assert "tarball" in INSTALLERS.names()
    assert check_installer("tarball", tarball_sample) == []


@pytest.mark.parametrize("check", sorted(DEFECTS))
def test_the_kit_fails_an_installer_with_one_planted_defect(check: str, write_plugin: Callable[[str], object]) -> None:
    good, bad = DEFECTS[check]
    assert good in PLUGIN
    write_plugin(PLUGIN.replace(good, bad))
    problems = check_installer(DOTTED, tarball_sample, only=[check])
    assert problems and all(p.startswith(f"{check}:") for p in problems), problems


def test_a_packages_installer_through_its_entry_point(tmp_path: Path) -> None:
    """``forge harness install`` with a harness whose manager a package registers in its ``pyproject.toml``
    (``[project.entry-points."forge.harness_installers"]``), nothing of forge edited."""
    (tmp_path / "site" / "tarball_installer").mkdir(parents=True)
    (tmp_path / "site" / "tarball_installer" / "__init__.py").write_text("")
    (tmp_path / "site" / "tarball_installer" / "plugin.py").write_text(PLUGIN)
    info = tmp_path / "site" / "tarball_installer-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tarball-installer\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[forge.harness_installers]\n"
                                           "tarball = tarball_installer.plugin:TarballInstaller\n")
    config = yaml.safe_load((configs_dir() / "harness" / "zeroclaw.yaml").read_text())
    config.update(name="kit-tool", entrypoint="kit-tool", binary_path=None,
                  package={"manager": "tarball", "name": _tarball(tmp_path).as_uri(), "version": "2.0"})
    (tmp_path / "configs" / "harness").mkdir(parents=True)
    (tmp_path / "configs" / "harness" / "kit-tool.yaml").write_text(yaml.safe_dump(config))
    env = {"PYTHONPATH": str(tmp_path / "site"), "FORGE_HOME": str(tmp_path / "home")}
    result = forge("harness", "install", "kit-tool", "--config-dir", str(tmp_path / "configs"), "--json", env=env)
    assert result.returncode == 0, result.stderr
    (manifest,) = json.loads(result.stdout)
    assert manifest["manager"] == "tarball" and manifest["version_output"] == "--version: kit-tool 2.0"
    assert (tmp_path / "home" / "harnesses" / "kit-tool" / "lib" / "kit-tool").is_file()


def test_an_unknown_manager_names_the_registered_installers(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as composed:
        compose_resolved(["harness=react", "harness.package.manager=nope"])
    (problem,) = composed.value.problems
    assert "harness.package.manager" in problem and "registered: binary, builtin, npm, pypi" in problem, problem
    react = yaml.safe_load((configs_dir() / "harness" / "react.yaml").read_text())
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "odd.yaml").write_text(yaml.safe_dump({**react, "name": "odd",
                                                                    "package": {"manager": "apt"}}))
    with pytest.raises(UserError) as loaded:
        load_harness("odd", tmp_path)
    assert loaded.value.exit_code == 2 and "unknown harness installer 'apt'" in loaded.value.message
