"""Serving a context longer than the checkpoint's own: YaRN RoPE scaling, or a clear refusal."""

from __future__ import annotations

import json
import math
from pathlib import Path

import httpx
import pytest

from forge_cli.config.compose import compose
from forge_cli.config.schema import SmolModel
from forge_cli.errors import UserError
from forge_cli.serve.server import context_extension_args


def _model(*overrides: str) -> SmolModel:
    model = compose(list(overrides)).experiment.model
    assert isinstance(model, SmolModel)
    return model


def _checkpoint(tmp_path: Path, rope: dict[str, object] | None = None) -> Path:
    config = {"max_position_embeddings": 8192,
              "rope_parameters": rope or {"rope_theta": 100000.0, "rope_type": "default"}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def test_native_context_needs_nothing(tmp_path: Path) -> None:
    assert context_extension_args(_model("model.max_model_len=8192"), _checkpoint(tmp_path)) == []


def test_longer_context_is_served_with_yarn(tmp_path: Path) -> None:
    args = context_extension_args(_model("model.max_model_len=32768"), _checkpoint(tmp_path))
    assert args[0] == "--hf-overrides"
    overrides = json.loads(args[1])
    assert overrides["max_position_embeddings"] == 32768
    rope = overrides["rope_parameters"]
    assert rope == {"rope_type": "yarn", "rope_theta": 100000.0, "factor": 4.0,
                    "original_max_position_embeddings": 8192, "attention_factor": 1.0}


def test_none_refuses_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(UserError) as err:
        context_extension_args(_model("model.max_model_len=32768", "model.context_extension=none"),
                               _checkpoint(tmp_path))
    assert "native context of 8192" in err.value.message and "max_model_len<=8192" in (err.value.fix or "")


def test_other_rope_types_are_not_rescaled(tmp_path: Path) -> None:
    rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0}
    with pytest.raises(UserError, match="llama3"):
        context_extension_args(_model("model.max_model_len=32768"), _checkpoint(tmp_path, rope))


@pytest.mark.vllm
@pytest.mark.e2e  # the 32,768-token server (~50 s to start) and an 8,400-token prefill (~60 s on 2 cores)
def test_prompt_beyond_native_context_has_finite_logprobs(long_context_server) -> None:  # type: ignore[no-untyped-def]
    """Served at 32,768 tokens (tests/conftest.py), a ~8,400-token prompt past SmolLM2's 8,192 positions: every
    sampled token has a finite logprob (without YaRN vLLM answered null logprobs here)."""
    words = " ".join(f"item{i}" for i in range(1900))  # ~8,400 tokens: just past the native 8,192
    resp = httpx.post(long_context_server.base_url + "/chat/completions", timeout=900, json={
        "model": long_context_server.model, "max_tokens": 8, "logprobs": True, "return_token_ids": True,
        "messages": [{"role": "user", "content": f"A list: {words}\nWhat is the first item?"}]})
    body = resp.json()
    assert resp.status_code == 200, body
    assert len(body["prompt_token_ids"]) > 8192
    logprobs = [entry["logprob"] for entry in body["choices"][0]["logprobs"]["content"]]
    assert logprobs and all(lp is not None and math.isfinite(lp) for lp in logprobs)
