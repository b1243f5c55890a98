"""Bad input to the runtime: one clear message each, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from forge_cli.config.schema import Resources
from forge_cli.errors import UserError
from forge_cli.runtime.base import SandboxConfigError
from forge_cli.runtime.local import LocalSandbox
from forge_cli.runtime.registry import backend
from forge_cli.runtime.spec import SandboxSpec
from tests.helpers import forge
from tests.runtime.conftest import run


def test_malformed_resources_in_the_config() -> None:
    result = forge("config", "show", "runtime=docker", "runtime.resources.memory=lots")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "runtime.resources.memory" in result.stderr and "not a memory size" in result.stderr
    with pytest.raises(ValidationError, match="not a memory size"):
        Resources(memory="lots")
    with pytest.raises(ValidationError, match="greater than 0"):
        Resources(cpus=0)


def test_unknown_runtime() -> None:
    with pytest.raises(UserError, match="unknown sandbox runtime 'podman'"):
        backend("podman")
    result = forge("sandbox", "cleanup", "-r", "podman")
    assert result.returncode == 2 and "Traceback" not in result.stderr and "unknown runtime 'podman'" in result.stderr


def test_missing_bundle() -> None:
    spec = SandboxSpec(run_id="bad", rollout_id="b1", image="-", workdir="/work", bundle_host_path="/nonexistent/b")
    with pytest.raises(SandboxConfigError, match="harness bundle /nonexistent/b does not exist"):
        run(LocalSandbox.create(spec))


def test_local_maps_the_specs_sandbox_paths(tmp_path: Path) -> None:
    """A spec written for containers (workdir, HOME, bundle mount in argv and env) runs on local as is."""
    bundle = tmp_path / "bundle"
    (bundle / "bin").mkdir(parents=True)
    (bundle / "bin" / "tool").write_text("#!/bin/sh\necho tool in $PWD home $HOME cfg $TOOL_CFG\n")
    (bundle / "bin" / "tool").chmod(0o755)
    spec = SandboxSpec(run_id="map", rollout_id="m1", image="-", workdir="/work", bundle_host_path=str(bundle),
                       env={"HOME": "/tmp/forge-home", "PATH": "/opt/forge/harness/bin:/usr/bin:/bin",
                            "TOOL_CFG": "/tmp/forge-home/.tool/cfg.json"})

    async def body() -> tuple[str, str, str, str]:
        async with await LocalSandbox.create(spec) as sb:
            by_path = await sb.exec(["tool"])
            by_mount = await sb.exec(["/opt/forge/harness/bin/tool"], cwd="/work")
            await sb.write_file("/tmp/forge-home/.tool/cfg.json", "{}")
            return by_path.stdout, by_mount.stdout, str(sb.home), str(sb.work)

    by_path, by_mount, home, work = run(body())
    assert by_path == by_mount
    assert by_path.startswith("tool in ") and f"home {home} cfg {home}/.tool/cfg.json" in by_path
    assert by_path.split()[2] == work
