"""Fixtures shared by every test package.

``policy_server``: ONE real vLLM server on the default model (SmolLM2-135M-Instruct, CPU) for the
whole session, started through ``forge_cli.serve.start_server`` on a free loopback port. It has
``.url`` (``http://127.0.0.1:PORT``, no ``/v1``), ``.base_url`` (with ``/v1``) and ``.model`` (the
served name). It serves a 32,768-token context (``SERVED_CONTEXT``, beyond SmolLM2's own 8,192) so that
the real harnesses' prompts fit, in float32 (``SERVED_DTYPE``: bf16 is emulated, ~30x slower, on AVX2
CPUs). Mark tests that use it ``@pytest.mark.vllm``. Tests that change its weights must put the
original ones back (see tests/serve/test_weights.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from forge_cli.serve import PolicyServer


SERVED_CONTEXT = 32768
SERVED_DTYPE = "float32"


@pytest.fixture(scope="session")
def policy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PolicyServer]:
    """A real vLLM server on the default model, shared by the session (~1 min to start on 2 cores)."""
    from forge_cli.config.compose import compose
    from forge_cli.paths import env_python
    from forge_cli.serve import start_server

    if not env_python("vllm").exists():
        pytest.skip(f"forge's vLLM environment is not installed ({env_python('vllm')}); run scripts/setup.sh vllm")
    # 32,768 tokens (SmolLM2's own is 8,192): the real harnesses' own prompts must fit as they send them
    # (Qwen Code's first request is ~17,500 tokens, OpenClaw's ~8,800; tests/harness/test_e2e_harnesses.py).
    # float32: on CPUs without native bf16 (AVX2 only, as here) torch's bf16 matmul ran at 0.4 GFLOP/s against
    # 30 for float32 (one thread); vLLM prefilled ~25 tokens/s in bf16 and 845 in float32 under the same load.
    model = compose([f"model.max_model_len={SERVED_CONTEXT}", f"model.dtype={SERVED_DTYPE}"]).experiment.model
    log_path = tmp_path_factory.mktemp("policy-server") / "vllm.log"
    server = start_server(model, port=0, log_path=log_path, timeout=900)
    try:
        yield server
    finally:
        server.stop()
