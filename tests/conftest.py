"""Fixtures shared by every test package.

``policy_server``: ONE real vLLM server on the default model (SmolLM2-135M-Instruct, CPU) for the whole session,
started through ``forge_cli.serve.start_server`` on a free loopback port, at the model's own 8,192-token context
(``NATIVE_CONTEXT``: the default configuration users run). ``long_context_server``: a second one at 32,768 tokens
(``LONG_CONTEXT``, served with YaRN RoPE scaling past the native context), started only when a test asks for it:
the real harnesses' own prompts (Qwen Code ~17,500 tokens, Gemini CLI ~11,000, OpenClaw ~8,800) and the
long-context tests. YaRN changes short-prompt behaviour a little (a tool-call test that passes natively got no
parsed call in 12 samples), so behaviour tests use the native server. Both have ``.url`` (``http://127.0.0.1:PORT``,
no ``/v1``), ``.base_url`` (with ``/v1``) and ``.model``; both serve float32 (``SERVED_DTYPE``: bf16 is emulated,
~30x slower, on AVX2 CPUs). Mark tests that use them ``@pytest.mark.vllm``. Tests that change weights must put the
original ones back (see tests/serve/test_weights.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from forge_cli.serve import PolicyServer


NATIVE_CONTEXT = 8192
LONG_CONTEXT = 32768
SERVED_DTYPE = "float32"


def _serve(context: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PolicyServer]:
    from forge_cli.config.compose import compose
    from forge_cli.paths import env_python
    from forge_cli.serve import start_server

    if not env_python("vllm").exists():
        pytest.skip(f"forge's vLLM environment is not installed ({env_python('vllm')}); run scripts/setup.sh vllm")
    # float32: on CPUs without native bf16 (AVX2 only, as here) torch's bf16 matmul ran at 0.4 GFLOP/s against
    # 30 for float32 (one thread); vLLM prefilled ~25 tokens/s in bf16 and 845 in float32 under the same load.
    model = compose([f"model.max_model_len={context}", f"model.dtype={SERVED_DTYPE}"]).experiment.model
    log_path = tmp_path_factory.mktemp(f"policy-server-{context}") / "vllm.log"
    server = start_server(model, port=0, log_path=log_path, timeout=900)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def policy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PolicyServer]:
    """A real vLLM server on the default model at its native context, shared by the session (~1 min to start)."""
    yield from _serve(NATIVE_CONTEXT, tmp_path_factory)


@pytest.fixture(scope="session")
def long_context_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PolicyServer]:
    """The same model served at 32,768 tokens (YaRN past the native 8,192), for the harnesses' own long prompts."""
    yield from _serve(LONG_CONTEXT, tmp_path_factory)
