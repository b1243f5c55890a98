"""Every entry point that runs outside forge's own interpreter (``forge_cli/entrypoints.py``) imports only what its
interpreter has: its forge imports (direct and indirect, from the package's import graph) stay within what the table
allows, and the module imports (or its ``--help`` runs) in its real interpreter with the import path it really
gets there: mitmproxy's environment with the proxy's import root, veRL's and OSWorld's environments, the standard
library alone for the sandbox's react agent, and the desktop image for its in-VM server (``make test-e2e``)."""

from __future__ import annotations

import os
import pkgutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

from forge_cli.entrypoints import ENTRY_POINTS, EntryPoint
from forge_cli.paths import env_python

PACKAGE = Path(__file__).resolve().parents[1] / "forge_cli"
BY_MODULE = {e.module: e for e in ENTRY_POINTS}
CONTRACTS = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def _allowed(entry: EntryPoint, module: str) -> bool:
    if module == "forge_cli":  # the package itself (its __init__, imported with any of its modules)
        return bool(entry.forge_imports)
    return any(module == p or module.startswith(p + ".") for p in entry.forge_imports)


@pytest.mark.parametrize("module", [e.module for e in ENTRY_POINTS if e.module.startswith("forge_cli.")])
def test_forge_imports_stay_within_what_the_interpreter_has(module: str) -> None:
    graph = grimp.build_graph("forge_cli")
    used = graph.find_upstream_modules(module)
    entry = BY_MODULE[module]
    assert [m for m in sorted(used) if not _allowed(entry, m)] == []


def test_the_tree_shows_where_each_entry_point_runs() -> None:
    """Every module under forge_cli/remote/ is an entry point of the table, in the subpackage named for where it
    runs, and every entry point of forge_cli's own modules is there (the desktop image's files are the image's)."""
    remote = {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts)
              for p in (PACKAGE / "remote").rglob("*.py") if p.name != "__init__.py"}
    assert remote == {e.module for e in ENTRY_POINTS if e.module.startswith("forge_cli.")}
    for entry in ENTRY_POINTS:
        if entry.module.startswith("forge_cli."):
            assert entry.module.split(".")[2] == entry.interpreter.split(":")[-1], entry
    # and the places import nothing of each other (one independence contract over every subpackage)
    [places] = [c for c in CONTRACTS if c["type"] == "independence"]
    assert sorted(places["modules"]) == sorted(f"forge_cli.remote.{p.name}" for p in (PACKAGE / "remote").iterdir()
                                               if (p / "__init__.py").is_file())


def test_no_module_of_forges_own_process_may_import_the_remote_package() -> None:
    [contract] = [c for c in CONTRACTS if c.get("forbidden_modules") == ["forge_cli.remote"]]
    top = {f"forge_cli.{m.name}" for m in pkgutil.iter_modules([str(PACKAGE)])} - {"forge_cli.remote"}
    assert sorted(contract["source_modules"]) == sorted(top)


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, **kwargs)  # type: ignore[call-overload]


@pytest.mark.requires("mitmproxy")
def test_the_proxy_and_its_writer_import_in_mitmproxys_environment_from_their_import_root() -> None:
    from forge_cli.proxy.launcher import child_import_root

    root = child_import_root()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")} | {"PYTHONPATH": str(root)}
    done = _run([str(env_python("mitmproxy")), "-c",
                 "import forge_cli.remote.mitmproxy.main, forge_cli.remote.mitmproxy.writer"], cwd=root, env=env)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.requires("verl")
def test_the_agent_loop_imports_in_verls_environment() -> None:
    done = _run([str(env_python("verl")), "-c",
                 "import forge_cli.remote.verl.agent_loop, forge_cli.remote.verl.sampler"])
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.requires("osworld")
def test_the_host_runner_starts_in_osworlds_environment() -> None:
    done = _run([str(env_python("osworld")), str(PACKAGE / "remote" / "osworld" / "host_runner.py"), "--help"])
    assert done.returncode == 0 and "host_runner.py" in done.stdout, done.stderr[-3000:]


def test_the_react_agent_starts_on_the_standard_library_alone() -> None:
    # -I -S: no environment variables, no site-packages, not even the script's own directory: the standard library
    done = _run([sys.executable, "-I", "-S", str(PACKAGE / "remote" / "sandbox" / "react_agent.py"), "--help"])
    assert done.returncode == 0 and "forge-react" in done.stdout, done.stderr[-3000:]


@pytest.mark.e2e
@pytest.mark.requires("desktop")
def test_the_desktop_server_starts_in_the_desktop_image() -> None:
    done = _run(["docker", "run", "--rm", "--network", "none", "forge-desktop:bookworm", "python3",
                 "/opt/forge-desktop/server.py", "--help"])
    assert done.returncode == 0 and "--port" in done.stdout, done.stderr[-3000:]
