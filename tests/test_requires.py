"""tests/requires.py: a missing part skips with its install command, fails under CI=true when `make test` installs it,
and keeps skipping under CI=true when no `make test` does; and what `make test` installs is here (under CI=true
a missing one fails this file even if no other test asks for it)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers import REPO
from tests.requires import PARTS, in_ci, message, part, requires

PROBE = "tests/requires_probe.py"


def _probe(ci: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "PYTEST_ADDOPTS")}
    env.update({"CI": ci, "FORGE_TEST_MISSING": "vllm"})
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA", PROBE], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)


def test_under_ci_a_missing_part_make_test_installs_fails_naming_it_and_the_fix() -> None:
    done = _probe("true")
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    # the function form fails in the test, the two marker forms in its setup; the cluster still skips
    assert "1 failed, 1 skipped" in out and "2 error" in out, out
    assert out.count("CI=true: needs vllm: hidden by FORGE_TEST_MISSING; make test installs it") >= 3, out
    assert "fix: scripts/setup.sh vllm" in out
    assert "SKIPPED" in out and "needs kubernetes: KUBECONFIG not set (no Kubernetes cluster runs" in out


def test_elsewhere_a_missing_part_skips_with_the_fix() -> None:
    done = _probe("")
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "4 skipped" in out, out
    # one line per test (tests/conftest.py reports a skip at the test that asked)
    assert out.count("needs vllm: hidden by FORGE_TEST_MISSING; make test installs it") == 3, out
    assert "CI=true" not in out


def test_the_table() -> None:
    for found in PARTS.values():
        if found.ci:
            assert found.install.startswith(("scripts/setup.sh", "FORGE_HARNESSES=")), found
            assert not found.absent_reason
        else:
            assert found.absent_reason, f"{found.name}: say why it may be absent in CI"
    assert part("harness:pi").ci and not part("harness:codex").ci
    assert "make test-e2e" in message("harness:codex", "not installed")
    with pytest.raises(KeyError, match="no part 'nope'"):
        part("nope")


@pytest.mark.parametrize("name", [name for name, found in PARTS.items() if found.ci])
def test_what_make_test_installs_is_here(name: str) -> None:
    requires(name)


def test_ci_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for value, expected in (("true", True), ("1", True), ("", False), ("false", False)):
        monkeypatch.setenv("CI", value)
        assert in_ci() is expected
