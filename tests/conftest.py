"""Fixtures shared by every test package.

``policy_server``: ONE real vLLM server on the default model (SmolLM2-135M-Instruct, CPU) for the
whole session, started through ``forge_cli.serve.start_server`` on a free loopback port. It has
``.url`` (``http://127.0.0.1:PORT``, no ``/v1``), ``.base_url`` (with ``/v1``) and ``.model`` (the
served name). Mark tests that use it ``@pytest.mark.vllm``. Tests that change its weights must put
the original ones back (see tests/serve/test_weights.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from forge_cli.serve import PolicyServer


@pytest.fixture(scope="session")
def policy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PolicyServer]:
    """A real vLLM server on the default model, shared by the session (~1 min to start on 2 cores)."""
    from forge_cli.config.compose import compose
    from forge_cli.paths import env_python
    from forge_cli.serve import start_server

    if not env_python("vllm").exists():
        pytest.skip(f"forge's vLLM environment is not installed ({env_python('vllm')}); run scripts/setup.sh vllm")
    model = compose([]).experiment.model
    log_path = tmp_path_factory.mktemp("policy-server") / "vllm.log"
    server = start_server(model, port=0, log_path=log_path, timeout=900)
    try:
        yield server
    finally:
        server.stop()
