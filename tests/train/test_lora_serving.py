"""LoRA training against a real vLLM server (CPU): one step on hand-made samples changes only the adapter, the
checkpoint goes to the running server, and the server's logprobs of the tokens it samples agree with the trainer's.

Two ways, both real: a server forge starts for ``trainer.lora`` (base + identity adapter, the new adapter loaded at
run time with ``/v1/load_lora_adapter``, in place), and the session's plain ``policy_server``, which serves no
adapter and gets the adapter merged into full weights (its original weights are put back afterwards). The
tolerance is that of tests/train/test_train_run.py (1e-3; measured here: ~1e-5).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from forge_cli.config.compose import compose
from forge_cli.serve import PolicyServer
from forge_cli.train.sample import Sample
from tests.requires import module, requires

pytestmark = pytest.mark.vllm
torch = module("torch", "core")  # with peft: forge's [train] extra
LORA = "trainer.lora={rank:8,alpha:16}"
TOLERANCE = 1e-3


@pytest.fixture(scope="module")
def lora_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PolicyServer]:
    """vLLM as forge train starts it for trainer.lora: the base as policy-base, the identity adapter as policy."""
    from forge_cli.serve import start_server

    requires("vllm")
    exp = compose(["model.max_model_len=2048", "model.dtype=float32", "model.kv_cache_gb=1", LORA]).experiment
    log_path = tmp_path_factory.mktemp("lora-server") / "vllm.log"
    server = start_server(exp.model, port=0, log_path=log_path, timeout=900, lora=exp.trainer.lora)
    try:
        yield server
    finally:
        server.stop()


def _trainer() -> Any:
    from forge_cli.serve.prepare import default_model_dir
    from forge_cli.train.local import LocalTrainer

    exp = compose(["trainer.learning_rate=2e-3", "trainer.precision=float32", LORA]).experiment
    return LocalTrainer(default_model_dir(), exp.trainer, exp.algo)


def _samples(tokenizer: Any) -> list[Sample]:
    prompt = tokenizer("Task: create a.txt containing hi.\n")["input_ids"]
    out = []
    for answer, advantage in (("```bash\necho hi > a.txt\n```", 1.0), ("I cannot do that.", -1.0)):
        ids = tokenizer(answer)["input_ids"]
        out.append(Sample(rollout_id=answer, group_id="g", task_id="t", segment=0, prompt_ids=prompt,
                          response_ids=ids, loss_mask=[1] * len(ids), rollout_logprobs=[0.0] * len(ids),
                          reward=max(advantage, 0.0), advantage=advantage))
    return out


def _sampled(server: PolicyServer, prompt: list[int], model: str) -> tuple[list[int], list[float]]:
    """A few tokens the server samples (temperature 1, seeded) and its logprobs of them."""
    body = {"model": model, "prompt": prompt, "max_tokens": 6, "temperature": 1.0, "seed": 7, "logprobs": 0,
            "return_token_ids": True}
    response = httpx.post(server.base_url + "/completions", json=body, timeout=600)
    response.raise_for_status()
    choice = response.json()["choices"][0]
    return list(choice["token_ids"]), [float(x) for x in choice["logprobs"]["token_logprobs"]]


def _trainer_logprobs(trainer: Any, prompt: list[int], tokens: list[int]) -> list[float]:
    sample = Sample(rollout_id="probe", group_id="g", task_id="t", segment=0, prompt_ids=prompt,
                    response_ids=tokens, loss_mask=[1] * len(tokens), rollout_logprobs=[0.0] * len(tokens), reward=0)
    with torch.no_grad():
        return [float(x) for x in trainer.logprobs([sample])[0][0, :len(tokens)]]


def _train_one_step(tmp_path: Path) -> tuple[Any, Path, list[int]]:
    """One LoRA step on the two samples (only adapter weights change); the saved checkpoint; a probe prompt."""
    from transformers import AutoTokenizer

    from forge_cli.serve.prepare import default_model_dir

    trainer = _trainer()
    tokenizer = AutoTokenizer.from_pretrained(default_model_dir())
    samples = _samples(tokenizer)
    with torch.no_grad():
        start, _ = trainer.logprobs(samples)
    for row, sample in enumerate(samples):
        sample.rollout_logprobs = start[row, :len(sample.response_ids)].tolist()
    before = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    trainer.train_step(samples)
    changed = [k for k, v in trainer.model.state_dict().items() if not torch.equal(before[k], v)]
    assert changed and all("lora_" in k for k in changed), "only adapter weights change"
    checkpoint = tmp_path / "step-1"
    trainer.save(checkpoint)
    return trainer, checkpoint, tokenizer("Task: create b.txt containing bye.\n")["input_ids"]


def _agree(server: PolicyServer, trainer: Any, prompt: list[int], model: str) -> float:
    tokens, served = _sampled(server, prompt, model)
    delta = max(abs(a - b) for a, b in zip(served, _trainer_logprobs(trainer, prompt, tokens), strict=True))
    assert delta < TOLERANCE, (tokens, served, delta)
    return delta


def test_lora_step_is_served_as_an_adapter_loaded_at_run_time(lora_server: PolicyServer, tmp_path: Path) -> None:
    from forge_cli.serve.weights import served_adapter, update_weights, weight_version

    trainer, checkpoint, prompt = _train_one_step(tmp_path)
    cards = {c["id"]: c.get("parent") for c in httpx.get(lora_server.base_url + "/models").json()["data"]}
    assert cards == {"policy-base": None, "policy": "policy-base"} and served_adapter(lora_server) == "policy"
    # before the sync the server serves the identity adapter: the base, i.e. the trainer with its adapter disabled
    tokens, served = _sampled(lora_server, prompt, "policy")
    with trainer.model.disable_adapter():
        base = _trainer_logprobs(trainer, prompt, tokens)
    assert max(abs(a - b) for a, b in zip(served, base, strict=True)) < TOLERANCE

    assert update_weights(lora_server, checkpoint, version="lora-1") == "lora-1"
    assert weight_version(lora_server) == "lora-1"
    root = {c["id"]: c["root"] for c in httpx.get(lora_server.base_url + "/models").json()["data"]}
    assert root["policy"] == str(checkpoint.resolve()), "the adapter named policy was replaced in place"
    print(f"LoRA adapter served at run time: max |delta logprob| {_agree(lora_server, trainer, prompt, 'policy'):.1e}")
    # and the update is visible: the same tokens now score differently from the base
    after = _trainer_logprobs(trainer, prompt, tokens)
    assert max(abs(a - b) for a, b in zip(after, base, strict=True)) > 10 * TOLERANCE


def test_lora_step_on_a_server_without_lora_is_merged(policy_server: PolicyServer, tmp_path: Path) -> None:
    from forge_cli.serve.prepare import default_model_dir
    from forge_cli.serve.weights import served_adapter, update_weights

    trainer, checkpoint, prompt = _train_one_step(tmp_path)
    assert served_adapter(policy_server) is None
    try:
        update_weights(policy_server, checkpoint, version="lora-merged")
        delta = _agree(policy_server, trainer, prompt, policy_server.model)
        print(f"LoRA merged into full weights: max |delta logprob| {delta:.1e}")
        assert not list(tmp_path.glob(".step-1.merged-*")), "the merged weights are removed after the reload"
    finally:
        update_weights(policy_server, default_model_dir(), version="default")
