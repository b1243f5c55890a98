"""The sandbox conformance suite: every backend must behave the same way (inspect_ai's self_check idea).

The checks are forge_cli.testing.sandbox's (the kit a runtime in its own package runs too), one test each per
backend, plus what only forge's backends are asked here: a crashed forge leaves nothing cleanup cannot remove.
Runs on local always, on docker with the real daemon (marker ``docker``), on kubernetes when KUBECONFIG
points at a cluster. Every test checks by label/directory afterwards that nothing of its run is left.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from forge_cli.testing.sandbox import CHECKS, run_check
from tests.runtime.conftest import ROOT, Factory, run


@pytest.mark.parametrize("check", list(CHECKS))
def test_conformance(check: str, sandboxes: Factory) -> None:
    """One check of forge_cli.testing.sandbox (the kit a runtime plugin runs) on this backend."""
    problem = run(run_check(check, sandboxes.create))
    assert problem is None, problem


def test_cleanup_after_a_crash(sandboxes: Factory) -> None:
    """A forge process dies with a sandbox and a command running in it: cleanup(run) removes both."""
    script = f"""
import asyncio, os, sys
sys.path.insert(0, {str(ROOT)!r})
from tests.runtime.conftest import Factory
async def main():
    factory = Factory({sandboxes.kind!r})
    factory.run_id = {sandboxes.run_id!r}
    sb = await factory.create()
    asyncio.ensure_future(sb.exec(["sleep", "300"]))
    await asyncio.sleep(1.5)
    print("ready", flush=True)
    os._exit(1)
asyncio.run(main())
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "ready" in proc.stdout, proc.stderr
    assert sandboxes.leftovers(), "the crashed process left nothing to clean up"
    removed = run(sandboxes.cls.cleanup(sandboxes.run_id, sandboxes.runtime))
    assert len(removed) == 1
    assert sandboxes.leftovers() == []
