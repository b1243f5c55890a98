"""npm harnesses: the pinned packages installed with ``npm install --prefix <bundle>/lib``.

npm's content cache is ``$FORGE_HOME/cache/npm`` (``--cache``), so a later ``--offline`` install
resolves every tarball and packument from it without the network.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from forge_cli.config.schema import HarnessConfig
from forge_cli.errors import UserError
from forge_cli.harness.node_runtime import NodeRuntime, npm_cache, npm_error, npm_executable, tool_path
from forge_cli.harness.proc import StepFailed, run


def specs(harness: HarnessConfig) -> list[str]:
    """``name@version`` of the main package followed by the extra ones, exactly as the YAML pins them."""
    pkg = harness.package
    if not pkg.name or not pkg.version:
        raise UserError(f"harness '{harness.name}': package.name and package.version must both be set",
                        fix=f"pin the package in configs/harness/{harness.name}.yaml")
    return [f"{pkg.name}@{pkg.version}", *pkg.extra]


def install(harness: HarnessConfig, lib: Path, node: NodeRuntime, *, offline: bool, log: Path) -> None:
    """Install the harness's packages into ``lib/node_modules`` (``lib/package.json`` pins them)."""
    lib.mkdir(parents=True, exist_ok=True)
    (lib / "package.json").write_text(json.dumps({"name": f"forge-bundle-{harness.name}", "private": True}) + "\n")
    argv = [npm_executable(), "install", "--prefix", str(lib), "--cache", str(npm_cache()),
            "--save-exact", "--omit=dev", "--no-audit", "--no-fund", "--loglevel=error",
            "--offline" if offline else "--prefer-offline"]
    if not harness.package.scripts:
        argv.append("--ignore-scripts")
    argv += specs(harness)
    env = {"PATH": tool_path(node), "npm_config_update_notifier": "false", "npm_config_engine_strict": "false"}
    try:
        run(argv, log=log, env=env, cwd=lib, timeout=3600)
    except StepFailed as exc:
        raise npm_error(exc, " ".join(specs(harness)), offline, log) from None


def _lock(lib: Path) -> dict[str, Any]:
    for name in ("package-lock.json", "node_modules/.package-lock.json"):
        path = lib / name
        if path.is_file():
            data: dict[str, Any] = json.loads(path.read_text())
            return data
    return {"packages": {}}


def installed_packages(lib: Path) -> dict[str, str]:
    """Every package npm installed, ``{name: version}`` (aliases under their alias name)."""
    out: dict[str, str] = {}
    for key, meta in _lock(lib).get("packages", {}).items():
        if key.startswith("node_modules/") and "version" in meta:
            out[key.rsplit("node_modules/", 1)[1]] = str(meta["version"])
    return dict(sorted(out.items()))


def artifacts(harness: HarnessConfig, lib: Path) -> list[dict[str, str]]:
    """The registry tarballs of the pinned packages with npm's integrity hash (sha512 of the tarball)."""
    wanted = {_spec_name(spec) for spec in specs(harness)}
    out = []
    for key, meta in _lock(lib).get("packages", {}).items():
        name = key.rsplit("node_modules/", 1)[-1]
        if key.startswith("node_modules/") and name in wanted:
            entry = {"package": name, "version": str(meta.get("version", "")),
                     "integrity": str(meta.get("integrity", ""))}
            if meta.get("resolved"):  # absent when npm is set to omit-lockfile-registry-resolved
                entry["resolved"] = str(meta["resolved"])
            out.append(entry)
    return out


def _spec_name(spec: str) -> str:
    """'@scope/pkg@1.0' → '@scope/pkg'; an alias 'a@npm:b@1' → 'a'."""
    at = spec.find("@", 1)
    return spec if at < 0 else spec[:at]


def entry_target(harness: HarnessConfig, lib: Path) -> Path:
    """The file the main package's ``bin`` names for the harness's entrypoint."""
    pkg_dir = lib / "node_modules" / str(harness.package.name)
    manifest = json.loads((pkg_dir / "package.json").read_text())
    bins = manifest.get("bin")
    if isinstance(bins, str):
        rel = bins
    elif isinstance(bins, dict) and (harness.entrypoint in bins or len(bins) == 1):
        rel = bins.get(harness.entrypoint) or next(iter(bins.values()))
    else:
        raise UserError(f"{harness.package.name} has no program '{harness.entrypoint}' (its bin: {bins})",
                        fix=f"set entrypoint in configs/harness/{harness.name}.yaml to one of its programs")
    target = (pkg_dir / rel).resolve()
    if not target.is_file():
        raise UserError(f"{harness.package.name}'s program {rel} is missing after the install",
                        fix="its install script may have failed: check package.scripts in the harness YAML")
    return target
