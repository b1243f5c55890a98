"""Bad input to the runtime: one clear message each, no traceback."""

from __future__ import annotations

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
    assert result.returncode == 1 and "Traceback" not in result.stderr and "unknown runtime 'podman'" in result.stderr


def test_missing_bundle() -> None:
    spec = SandboxSpec(run_id="bad", rollout_id="b1", image="-", workdir="/work", bundle_host_path="/nonexistent/b")
    with pytest.raises(SandboxConfigError, match="harness bundle /nonexistent/b does not exist"):
        run(LocalSandbox.create(spec))
