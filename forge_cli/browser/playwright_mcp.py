"""``@playwright/mcp``: the browser tools every harness gets, installed once per version under
``$FORGE_HOME/tools/playwright-mcp-<version>/`` with forge's pinned Node runtime.

Layout: ``lib/node_modules`` (npm, install scripts off: it downloads no browser), ``manifest.json`` (versions and
npm's sha512 integrity of each package tarball; written last, so its presence means "installed"). The server runs
per rollout over stdio and attaches to that rollout's Chromium over CDP (``--cdp-endpoint``), so it never launches a
browser of its own.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from forge_cli.errors import UserError
from forge_cli.harness.node_runtime import ensure_node, npm_cache, npm_error, npm_executable, tool_path
from forge_cli.harness.proc import StepFailed, run
from forge_cli.paths import forge_home

PACKAGE = "@playwright/mcp"
VERSION = "0.0.83"


def install_dir(version: str = VERSION) -> Path:
    return forge_home() / "tools" / f"playwright-mcp-{version}"


def manifest(version: str = VERSION) -> dict[str, Any] | None:
    """The install's manifest, or None when it is not installed."""
    path = install_dir(version) / "manifest.json"
    try:
        data: dict[str, Any] = json.loads(path.read_text())
        return data
    except (OSError, ValueError):
        return None


def ensure_installed(version: str = VERSION, *, offline: bool = False) -> dict[str, Any]:
    """Install ``@playwright/mcp@version`` when it is not (UserError exit 1 when npm cannot); its manifest."""
    found = manifest(version)
    if found is not None:
        return found
    target = install_dir(version)
    target.parent.mkdir(parents=True, exist_ok=True)
    with (target.parent / f".{target.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = manifest(version)
        if found is not None:
            return found
        log = target.parent / f"{target.name}.install.log"
        node = ensure_node(offline=offline, log=log)
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}-") as tmp:
            lib = Path(tmp) / "lib"
            lib.mkdir()
            (lib / "package.json").write_text(json.dumps({"name": "forge-playwright-mcp", "private": True}) + "\n")
            spec = f"{PACKAGE}@{version}"
            argv = [npm_executable(), "install", "--prefix", str(lib), "--cache", str(npm_cache()), "--save-exact",
                    "--omit=dev", "--no-audit", "--no-fund", "--loglevel=error", "--ignore-scripts",
                    "--offline" if offline else "--prefer-offline", spec]
            try:
                run(argv, log=log, env={"PATH": tool_path(node), "npm_config_update_notifier": "false"}, cwd=lib,
                    timeout=1800)
            except StepFailed as exc:
                raise npm_error(exc, spec, offline, log) from None
            lock_file = json.loads((lib / "package-lock.json").read_text())
            packages = {key.rsplit("node_modules/", 1)[1]: {"version": meta.get("version"),
                                                             "integrity": meta.get("integrity")}
                        for key, meta in lock_file.get("packages", {}).items() if key.startswith("node_modules/")}
            data = {"package": PACKAGE, "version": version, "node": str(node.binary), "node_version": node.version,
                    "node_tarball_sha256": node.tarball_sha256, "packages": packages}
            if not (lib / "node_modules" / PACKAGE / "cli.js").is_file():
                raise UserError(f"{spec} installed without its cli.js", fix=f"see {log}")
            shutil.rmtree(target, ignore_errors=True)
            os.replace(tmp, target)
            os.mkdir(tmp)  # TemporaryDirectory removes it again on exit
        (target / "manifest.json").write_text(json.dumps(data, indent=2) + "\n")
        return data


def server_argv(cdp_url: str, version: str = VERSION) -> list[str]:
    """The server over stdio, attached to the browser at ``cdp_url``, with screenshots as images (``vision``)."""
    data = manifest(version)
    if data is None:
        raise UserError(f"{PACKAGE}@{version} is not installed", fix="forge browser install")
    cli = install_dir(version) / "lib" / "node_modules" / PACKAGE / "cli.js"
    node = data["node"] if os.path.isfile(data["node"]) else (shutil.which("node") or "node")
    return [node, str(cli), "--cdp-endpoint", cdp_url, "--caps", "vision", "--image-responses", "allow",
            "--no-webmcp", "--output-dir", "browser"]
