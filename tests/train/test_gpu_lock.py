"""The lock of veRL's GPU environment (`scripts/gpu_lock.py`, issue 33): the committed locks were compiled from
`scripts/requirements/verl-gpu.txt` as it is, satisfy its pins and hold verl 0.9.1, vllm 0.24.0 and torch 2.11.*;
the old `fastapi==0.165.0` pin (which made the environment unresolvable) fails the check. The full resolve against
PyPI runs in `make test-e2e`."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_lock", REPO / "scripts" / "gpu_lock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lock = _module()


def test_the_committed_locks_match_the_requirements_and_hold_the_pinned_versions() -> None:
    for python in lock.PYTHONS:
        assert lock.problems(python=python) == [], python
        held = lock.pins(lock.lock_path(python))
        assert held["verl"] == "0.9.1" and held["vllm"] == "0.24.0" and held["torch"].startswith("2.11.")
        assert "flash-attn" not in held  # verl[vllm] does not install it: the actor must load with sdpa
    assert lock.main(["check"]) == 0


def test_the_old_fastapi_pin_and_an_edited_requirements_file_fail_the_check(tmp_path: Path) -> None:
    old = tmp_path / "verl-gpu.txt"
    old.write_text(lock.REQUIREMENTS.read_text().replace("\nfastapi\n", "\nfastapi==0.165.0\n"))
    found = lock.problems(old, lock=lock.lock_path("3.11"))
    assert any("not compiled from verl-gpu.txt as it is now" in p for p in found), found
    assert any("fastapi==0.165.0 is required but verl-gpu-py311.lock holds fastapi==0.136" in p for p in found)
    stale = tmp_path / "stale.lock"  # a lock that lost the versions forge is written against
    stale.write_text(lock.lock_path("3.11").read_text().replace("vllm==0.24.0", "vllm==0.25.0"))
    assert any("holds vllm 0.25.0, not 0.24.0" in p for p in lock.problems(lock=stale))
    assert lock.problems(lock=tmp_path / "none.lock") == ["none.lock is missing: python3 scripts/gpu_lock.py compile"]


@pytest.mark.e2e
def test_the_requirements_resolve_for_every_python_on_pypi() -> None:
    """The full resolve (uv against PyPI, ~1 minute): it must succeed; other versions than the lock's are news."""
    if shutil.which("uv") is None and not (Path(sys.executable).parent / "uv").is_file():
        pytest.fail("uv is missing from .venv: scripts/setup.sh core installs it (the dev extra)")
    assert lock.main(["resolve"]) == 0
