"""PyPI harnesses: wheels downloaded into ``$FORGE_HOME/cache/pip/<harness>`` and installed with
``pip install --target <bundle>/lib/python`` from there (``--no-index``), so online and offline
installs take the same path.

A virtual environment is not relocatable (absolute paths in ``pyvenv.cfg`` and script shebangs), so
the bundle carries plain site-packages plus a small launcher that adds them to ``sys.path`` relative
to its own location and calls the console-script entry point. The sandbox image must provide the
same Python minor version as the one that installed the wheels (3.11: Debian bookworm's python3).
"""

from __future__ import annotations

import configparser
import shutil
import sys
from pathlib import Path

from forge_cli.checksums import sha256_file
from forge_cli.config.schema import HarnessConfig
from forge_cli.errors import UserError
from forge_cli.harness.proc import StepFailed, run
from forge_cli.paths import forge_home

PYTHON_TAG = f"{sys.version_info.major}.{sys.version_info.minor}"

LAUNCHER = '''\
"""forge bundle launcher for {harness}: runs `{entrypoint}` ({spec}) from this bundle's site-packages."""
import os
import site
import sys

if sys.version_info[:2] != {version}:
    sys.exit("forge bundle {harness} needs Python {python} (wheels built for it), not " + sys.version.split()[0])
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "python")
sys.path.insert(0, root)
site.addsitedir(root)  # honours .pth files
sys.argv[0] = "{entrypoint}"
from {module} import {head} as _entry  # noqa: E402

sys.exit(_entry{tail}())
'''

WRAPPER = '''\
#!/bin/sh
# forge bundle {harness}: {entrypoint} from {spec}; needs python{python} in the sandbox
d=$(dirname "$0")
for py in python{python} python3; do
  if command -v "$py" >/dev/null 2>&1; then exec "$py" -s "$d/../lib/{entrypoint}.py" "$@"; fi
done
echo "forge bundle {harness}: python{python} is not installed in this sandbox" >&2
exit 127
'''


def cache_dir(harness: HarnessConfig) -> Path:
    return forge_home() / "cache" / "pip" / harness.name


def spec(harness: HarnessConfig) -> list[str]:
    pkg = harness.package
    if not pkg.name or not pkg.version:
        raise UserError(f"harness '{harness.name}': package.name and package.version must both be set",
                        fix=f"pin the package in configs/harness/{harness.name}.yaml")
    return [f"{pkg.name}=={pkg.version}", *pkg.extra]


def _pip() -> list[str]:
    return [sys.executable, "-m", "pip", "--disable-pip-version-check"]


def install(harness: HarnessConfig, bundle: Path, *, offline: bool, log: Path) -> None:
    """Download (unless ``offline``) and install the harness's wheels into ``bundle/lib/python``."""
    wanted = " ".join(spec(harness))
    wheels = cache_dir(harness)
    wheels.mkdir(parents=True, exist_ok=True)
    if not offline:
        try:
            run([*_pip(), "download", "--only-binary=:all:", "-d", str(wheels), *spec(harness)], log=log, timeout=1800)
        except StepFailed as exc:
            raise _pip_error(exc, wanted, offline, log) from None
    target = bundle / "lib" / "python"
    try:
        run([*_pip(), "install", "--no-index", "--find-links", str(wheels), "--only-binary=:all:",
             "--target", str(target), "--no-warn-script-location", *spec(harness)], log=log, timeout=1800)
    except StepFailed as exc:
        raise _pip_error(exc, wanted, offline, log) from None
    # console scripts pip wrote carry absolute shebangs to this machine's interpreter: not usable elsewhere
    shutil.rmtree(target / "bin", ignore_errors=True)


def _pip_error(exc: StepFailed, wanted: str, offline: bool, log: Path) -> UserError:
    out = exc.output
    if "No matching distribution" in out or "Could not find a version" in out:
        if offline:
            return UserError(f"{wanted} is not in forge's wheel cache {log.parent.parent / 'pip'}, so it cannot be "
                             "installed offline", fix="run the same install once without --offline to fill the cache")
        return UserError(f"pip cannot find {wanted} ({exc.tail(2)})",
                         fix="check package.name and package.version in the harness's YAML")
    return UserError(f"pip failed while installing {wanted}:\n{exc.tail()}", fix=f"the full output is in {log}")


def _entry_point(harness: HarnessConfig, site_packages: Path) -> str:
    """'module:attr' of the console script named like the harness's entrypoint."""
    for info in sorted(site_packages.glob("*.dist-info")):
        points = info / "entry_points.txt"
        if not points.is_file():
            continue
        parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
        parser.optionxform = str  # type: ignore[assignment,method-assign]
        parser.read(points)
        if parser.has_option("console_scripts", harness.entrypoint):
            return parser.get("console_scripts", harness.entrypoint).split("[")[0].strip()
    raise UserError(f"no installed package provides the program '{harness.entrypoint}'",
                    fix=f"set entrypoint in configs/harness/{harness.name}.yaml to one of its console scripts")


def write_launcher(harness: HarnessConfig, bundle: Path) -> Path:
    """``lib/<entrypoint>.py`` and the ``bin/<entrypoint>`` shell wrapper that runs it relocatably."""
    target = _entry_point(harness, bundle / "lib" / "python")
    module, _, attr = target.partition(":")
    head, *rest = (attr or "main").split(".")
    fields = {"harness": harness.name, "entrypoint": harness.entrypoint, "spec": " ".join(spec(harness)),
              "python": PYTHON_TAG, "version": repr(tuple(sys.version_info[:2])), "module": module,
              "head": head, "tail": "".join(f".{part}" for part in rest)}
    launcher = bundle / "lib" / f"{harness.entrypoint}.py"
    launcher.write_text(LAUNCHER.format(**fields))
    wrapper = bundle / "bin" / harness.entrypoint
    wrapper.parent.mkdir(parents=True, exist_ok=True)
    wrapper.write_text(WRAPPER.format(**fields))
    wrapper.chmod(0o755)
    return launcher


def artifacts(harness: HarnessConfig, installed: dict[str, str]) -> list[dict[str, str]]:
    """The cached wheels that were installed (``installed``: {name: version}), each with its sha256."""
    keys = {f"{name.lower().replace('-', '_').replace('.', '_')}-{version}" for name, version in installed.items()}
    out = []
    for path in sorted(cache_dir(harness).glob("*.whl")):
        name, version = path.name.split("-")[:2]
        if f"{name.lower().replace('.', '_')}-{version}" in keys:
            out.append({"file": path.name, "sha256": sha256_file(path)})
    return out


def installed_packages(bundle: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for info in (bundle / "lib" / "python").glob("*.dist-info"):
        name, _, version = info.name.removesuffix(".dist-info").partition("-")
        out[name] = version
    return dict(sorted(out.items(), key=lambda item: item[0].lower()))
