"""Sandbox runtimes are plugins: one defined in a package of its own (its options class registered by ``kind``,
naming its Sandbox class) is composed, looked up and run with no central list edited, and passes
``forge_cli.testing.sandbox`` (the kit it runs); two copies with one planted defect each fail the check they break.

The plugin reuses the local backend's machinery (no bubblewrap, so that it runs on any machine), as a package that
wraps an existing runtime would."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from forge_cli.config.runtimes import RUNTIMES, validate_runtime
from forge_cli.envs.resolve import compose_resolved
from forge_cli.runtime.registry import backend
from forge_cli.runtime.spec import label_value
from forge_cli.testing.sandbox import check_sandbox, sandbox_maker
from tests.helpers import install_module, temporary_package

PLUGIN = '''
from typing import ClassVar, Literal

from forge_cli.config.runtimes import RuntimeOptions
from forge_cli.runtime.local import LocalSandbox


class WrappedOptions(RuntimeOptions, kind="wrapped-local"):
    kind: Literal["wrapped-local"]
    isolation: Literal["auto", "bwrap", "none"] = "none"
    sandbox: ClassVar[str] = "wrapped_runtime.backend:WrappedSandbox"


class WrappedSandbox(LocalSandbox):
    kind = "wrapped-local"
'''

DEFECTS = {
    "exec_output_and_exit_codes": '''
    async def exec(self, argv, **kwargs):
        import dataclasses
        result = await super().exec(argv, **kwargs)
        return dataclasses.replace(result, stderr_bytes=b"")  # loses stderr
''',
    "stop_is_idempotent_and_final": '''
    async def stop(self):
        await super().stop()
        self.stopped = False  # exec after stop still runs
''',
}


@pytest.fixture
def plugin(tmp_path: Path) -> Iterator[Path]:
    with temporary_package(tmp_path, "wrapped_runtime") as package:
        yield package
    RUNTIMES.remove("wrapped-local")


def _run(only: list[str] | None = None) -> list[str]:
    runtime = validate_runtime({"kind": "wrapped-local", "description": "a package's runtime"})
    cls = backend("wrapped-local")
    run_id = f"test-{uuid.uuid4().hex[:10]}"
    make = sandbox_maker(cls, runtime, {"run_id": run_id, "rollout_id": f"{run_id}-r", "image": "none",
                                        "workdir": "/work", "timeout_s": 120})
    try:
        return asyncio.run(check_sandbox(make, only))
    finally:
        asyncio.run(cls.cleanup(run_id, runtime))
        from forge_cli.runtime.local import sandboxes_root

        assert not (sandboxes_root() / label_value(run_id)).exists() or \
            not any((sandboxes_root() / label_value(run_id)).iterdir())


def test_a_packages_runtime_composes_and_passes_the_kit(plugin: Path) -> None:
    install_module(plugin, "backend", PLUGIN)
    # the shipped local runtime's settings with the kind switched: the plugin's options class validates them
    exp = compose_resolved(["runtime=local", "runtime.kind=wrapped-local"]).experiment
    assert type(exp.runtime).__name__ == "WrappedOptions" and exp.runtime.isolation == "auto"
    assert backend("wrapped-local").__name__ == "WrappedSandbox"
    assert "wrapped-local" in RUNTIMES.names()
    assert _run() == []


@pytest.mark.parametrize("check", sorted(DEFECTS))
def test_the_kit_fails_a_runtime_with_one_planted_defect(check: str, plugin: Path) -> None:
    install_module(plugin, "backend", PLUGIN + DEFECTS[check])
    problems = _run([check])
    assert len(problems) == 1 and problems[0].startswith(f"{check}:"), problems


def test_an_unknown_runtime_kind_names_the_registered_ones() -> None:
    with pytest.raises(ValueError, match=r"expected one of .docker., .kubernetes., .local."):
        validate_runtime({"kind": "nope", "description": "x"})
