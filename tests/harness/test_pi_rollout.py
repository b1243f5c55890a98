"""One real harness binary in `make test`: pi (its bundle, which `make test` installs with
``FORGE_HARNESSES=pi scripts/setup.sh harnesses``) runs one builtin task through `forge rollout +harness=pi` in a
local sandbox against the session's real vLLM server at the model's native 8,192-token context (pi's first request,
~5.3 KB, fits), through forge's capture proxy. The same checks as the real-harness suite of `make test-e2e`
(tests/harness/test_e2e_harnesses.py, every harness in docker): the harness ran to an end, its calls were recorded
for its rollout in Chat Completions with prompt and completion token ids and one finite logprob per completion
token, and nothing for any other rollout. One task, one rollout, 64 output tokens. Measured here: 114 s (pi's own
process 77 s) with vLLM up, while a second vLLM and the whole suite ran beside it on the 2 cores."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from forge_cli.paths import forge_home
from tests.conftest import NATIVE_CONTEXT
from tests.harness.test_e2e_harnesses import _check, _report, _rollout

pytestmark = [pytest.mark.vllm, pytest.mark.mitm, pytest.mark.requires("harness:pi")]


def test_pi_runs_a_task_through_the_proxy_against_vllm(tmp_path: Path, policy_server: Any) -> None:
    run = _rollout("pi", forge_home(), tmp_path / "runs", policy_server.url, runtime="local", context=NATIVE_CONTEXT)
    _report(run)
    _check(run, 1)
