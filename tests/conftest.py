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

What a test needs installed it declares with ``tests/requires.py`` (``requires("docker")`` or
``@pytest.mark.requires("harness:pi")``; the markers ``vllm``, ``docker`` and ``mitm`` imply their part): a missing
part skips the test with the command that installs it, or fails it under ``CI=true`` when ``make test`` installs it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.requires import requires

if TYPE_CHECKING:
    from forge_cli.serve import PolicyServer


NATIVE_CONTEXT = 8192
LONG_CONTEXT = 32768
SERVED_DTYPE = "float32"


# markers that imply a part (tests/requires.py)
MARKER_PARTS = {"vllm": "vllm", "docker": "docker", "mitm": "mitmproxy"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "requires(*parts): needs installed parts (tests/requires.py: skipped when "
                                       "missing, a failure under CI=true for what make test installs)")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Apply ``@pytest.mark.requires(...)`` and the part markers before any fixture starts."""
    names = [str(name) for marker in item.iter_markers("requires") for name in marker.args]
    names += [part for marker, part in MARKER_PARTS.items() if item.get_closest_marker(marker)]
    requires(*dict.fromkeys(names))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A skip from tests/requires.py is reported at the test that asked (as pytest does for skip marks), so ``-rs``
    lists each test with its reason instead of one line in the helper."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.skipped and isinstance(report.longrepr, tuple) and report.longrepr[0].endswith("requires.py"):
        path, line, _ = item.reportinfo()
        report.longrepr = (str(path), (line or 0) + 1, report.longrepr[2])


def _serve(context: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PolicyServer]:
    from forge_cli.config.compose import compose
    from forge_cli.serve import start_server

    requires("vllm")
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
