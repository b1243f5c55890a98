"""``forge harness install``: build a self-contained, relocatable harness bundle.

Layout (``bundle_paths``): ``$FORGE_HOME/harnesses/<name>/`` with

- ``bin/<entrypoint>``  a ``/bin/sh`` wrapper that finds everything relative to its own location, so
  the bundle runs wherever it is mounted (read-only is fine), e.g. ``/opt/forge/harness``;
- ``node/bin/node``     the pinned Node runtime (node harnesses);
- ``lib/``              ``node_modules`` (npm), ``python/`` site-packages (PyPI) or the program itself;
- ``manifest.json``     versions, sizes, hashes; written last, so its presence means "installed".

The bundle is built in a hidden temporary directory beside its final place and renamed into place
only after its entry point ran; a failed install leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from forge_cli import __version__
from forge_cli.checksums import sha256_file
from forge_cli.config.schema import HarnessConfig
from forge_cli.errors import UserError
from forge_cli.harness.bundle_paths import bundle_dir, manifest_path
from forge_cli.harness.installer import MANIFEST_KEYS, Progress, installer_for
from forge_cli.harness.proc import SYSTEM_PATH, is_elf
from forge_cli.paths import bundles_dir, forge_home

# bumped whenever the bundle layout changes, so that older bundles are rebuilt (2: node/lib/, 3: exec bits)
MANIFEST_SCHEMA = 3


# ---------------------------------------------------------------- harness configs
def known_harnesses(config_dir: Path | None = None) -> dict[str, Path]:
    from forge_cli.config.compose import group_options

    return group_options(config_dir)["harness"]


def load_harness(name: str, config_dir: Path | None = None) -> HarnessConfig:
    """The validated harness config ``name``; a UserError listing the known ones when there is none."""
    from pydantic import ValidationError

    known = known_harnesses(config_dir)
    if name not in known:
        raise UserError(f"unknown harness '{name}'", fix=f"known harnesses: {', '.join(sorted(known))}", exit_code=2)
    try:
        harness = HarnessConfig.model_validate(yaml.safe_load(known[name].read_text()))
    except (yaml.YAMLError, ValidationError) as exc:
        first = str(exc).strip().splitlines()
        raise UserError(f"{known[name]} is not a valid harness config: {' '.join(first[:3])}", exit_code=2) from None
    installer_for(harness)  # package.manager names a registered installer (UserError, exit 2, otherwise)
    return harness


# ---------------------------------------------------------------- manifest / listing
def read_manifest(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def installed_bundles() -> list[dict[str, Any]]:
    """Manifests of every installed bundle, by name."""
    root = bundles_dir()
    if not root.is_dir():
        return []
    out = []
    for entry in sorted(root.iterdir()):
        manifest = read_manifest(entry / "manifest.json") if not entry.name.startswith(".") else None
        if manifest is not None:
            out.append({**manifest, "path": str(entry)})
    return out


def tree_stats(root: Path) -> tuple[int, int]:
    """(file count, bytes on disk) of a directory tree; hard links count once, symlinks by their own size."""
    files = size = 0
    seen: set[tuple[int, int]] = set()
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            files += 1
            st = os.lstat(os.path.join(dirpath, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                size += st.st_size
    return files, size


_LIBRARY = re.compile(r"\.(so(\.\d+)*|node|o|a)$")


def fix_exec_bits(root: Path) -> list[str]:
    """Make ELF programs that were packed without an exec bit executable (Qwen Code's vendored ``rg``:
    on a writable install the harness chmods it at run time, which a read-only mount refuses).
    Shared libraries (``.so``, ``.node``) need no exec bit and are left alone. Returns the paths fixed."""
    fixed = []
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = Path(dirpath, name)
            st = path.lstat()
            if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o111 or st.st_size < 64 or _LIBRARY.search(name):
                continue
            if is_elf(path):
                path.chmod(st.st_mode | ((st.st_mode & 0o444) >> 2))
                fixed.append(path.relative_to(root).as_posix())
    return sorted(fixed)


def dedupe(root: Path, min_size: int = 1 << 20) -> int:
    """Hard-link identical large files inside a bundle (platform binaries that install scripts copy
    next to their package, e.g. Claude Code's and opencode's); returns the bytes saved."""
    by_size: dict[int, list[Path]] = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = Path(dirpath, name)
            st = path.lstat()
            if stat.S_ISREG(st.st_mode) and st.st_size >= min_size:
                by_size.setdefault(st.st_size, []).append(path)
    saved = 0
    for size, paths in by_size.items():
        firsts: dict[str, Path] = {}
        for path in paths:
            first = firsts.setdefault(sha256_file(path), path)
            if first is path or first.stat().st_ino == path.stat().st_ino:
                continue
            if first.stat().st_mode != path.stat().st_mode:
                continue
            link = path.with_name(f".{path.name}.forge-link")
            os.link(first, link)
            os.replace(link, path)
            saved += size
    return saved


# ---------------------------------------------------------------- verification
def verify_entrypoint(bundle: Path, harness: HarnessConfig, log: Path) -> str:
    """Run ``bin/<entrypoint> --version`` (``--help`` when it has none) with a scratch HOME and a bare
    environment; its first line of output, or a UserError with what it printed."""
    program = bundle / "bin" / harness.entrypoint
    # what runs the program: forge's builtin harness is a Python file the command runs with python3
    argv = [*installer_for(harness).run_prefix, str(program)]
    with tempfile.TemporaryDirectory(prefix="forge-verify-") as home:
        env = {"HOME": home, "PATH": SYSTEM_PATH, "LANG": "C.UTF-8", "TERM": "dumb", "NO_COLOR": "1"}
        outputs = []
        for flag in ("--version", "--help"):
            try:
                proc = subprocess.run([*argv, flag], env=env, cwd=home, stdin=subprocess.DEVNULL,
                                      capture_output=True, text=True, errors="replace", timeout=120, check=False)
            except subprocess.TimeoutExpired:
                outputs.append(f"{flag}: timed out after 120 s")
                continue
            except OSError as exc:
                outputs.append(f"{flag}: cannot be started ({exc.strerror})")
                break
            text = (proc.stdout.strip() or proc.stderr.strip())
            with log.open("a") as fh:
                fh.write(f"$ bin/{harness.entrypoint} {flag}\n{proc.stdout}{proc.stderr}(exit {proc.returncode})\n\n")
            if proc.returncode == 0 and text:
                return f"{flag}: {text.splitlines()[0].strip()}"
            outputs.append(f"{flag}: exit {proc.returncode}: {' | '.join(text.splitlines()[-3:])}")
    raise UserError(f"the installed {harness.name} does not run: " + "; ".join(outputs), fix=f"see the log {log}")


# ---------------------------------------------------------------- install
@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    root = bundles_dir()
    root.mkdir(parents=True, exist_ok=True)
    with (root / f".{name}.lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _is_current(harness: HarnessConfig, manifest: dict[str, Any], binary_path: Path | None = None) -> bool:
    """The installed bundle is what the config pins (and what its installer checks besides: forge's builtin agent
    or a user-provided binary the same file, a node harness the pinned Node)."""
    if manifest.get("schema") != MANIFEST_SCHEMA or manifest.get("version") != harness.package.version \
            or manifest.get("extras") != list(harness.package.extra):
        return False
    return installer_for(harness).is_current(manifest, binary_path)


def log_path(harness: HarnessConfig) -> Path:
    return forge_home() / "logs" / f"harness-install-{harness.name}.log"


def install(
    harness: HarnessConfig,
    *,
    offline: bool = False,
    force: bool = False,
    binary_path: Path | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Install ``harness`` as a bundle and return its manifest (the existing one when it is current)."""
    say = progress or (lambda _msg: None)
    final = bundle_dir(harness)
    with _locked(harness.name):
        current = read_manifest(manifest_path(harness))
        if current and not force and _is_current(harness, current, binary_path):
            return {**current, "already_installed": True}
        log = log_path(harness)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"forge {__version__}: installing {harness.name} ({datetime.now(UTC).isoformat()})\n\n")
        # what an install killed half-way left behind (we hold the lock: no other install is running)
        for stale in [*final.parent.glob(f".{harness.name}.tmp-*"), *final.parent.glob(f".{harness.name}.old-*")]:
            shutil.rmtree(stale, ignore_errors=True)
        started = time.monotonic()
        tmp = Path(tempfile.mkdtemp(prefix=f".{harness.name}.tmp-", dir=final.parent))
        try:
            manifest = _build(harness, tmp, offline=offline, binary_path=binary_path, log=log, say=say)
            files, size = tree_stats(tmp)
            manifest.update(file_count=files + 1, size_bytes=size, offline=offline,
                            install_seconds=round(time.monotonic() - started, 1),
                            installed_at=datetime.now(UTC).isoformat(timespec="seconds"))
            (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
            tmp.chmod(0o755)
            old = final.parent / f".{harness.name}.old-{os.getpid()}"
            if final.exists():
                os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    say(f"installed {harness.name} {harness.package.version} in {manifest['install_seconds']} s")
    return manifest


def _build(harness: HarnessConfig, tmp: Path, *, offline: bool, binary_path: Path | None, log: Path,
           say: Progress) -> dict[str, Any]:
    pkg = harness.package
    manifest: dict[str, Any] = {
        "schema": MANIFEST_SCHEMA, "name": harness.name, "manager": pkg.manager, "package": pkg.name,
        "version": pkg.version, "extras": list(pkg.extra), "runtime": harness.runtime,
        "entrypoint": f"bin/{harness.entrypoint}", "forge_version": __version__,
    }
    installed = installer_for(harness).install(tmp, offline=offline, binary_path=binary_path, log=log, say=say)
    clash = sorted(MANIFEST_KEYS & set(installed.manifest))
    if clash:
        raise ValueError(f"the {pkg.manager} installer's manifest fields {clash} are forge's own")
    manifest.update(installed.manifest)
    key_files = [*installed.key_files, tmp / "bin" / harness.entrypoint]
    manifest["exec_bits_fixed"] = fix_exec_bits(tmp)
    manifest["deduplicated_bytes"] = dedupe(tmp)
    say(f"checking that bin/{harness.entrypoint} runs")
    manifest["version_output"] = verify_entrypoint(tmp, harness, log)
    manifest["key_files"] = {p.relative_to(tmp).as_posix(): sha256_file(p) for p in key_files}
    return manifest
