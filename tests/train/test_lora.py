"""``trainer.lora`` without a server: the adapter files forge writes by hand (identity adapter, zero safetensors)
pinned to hand-computed shapes and bytes; the local trainer with LoRA trains only the adapters, its KL reference is
the base with the adapter disabled, its checkpoints are PEFT adapters that resume (adapter + AdamW state) and merge
into full weights; vLLM's launch line serves the base as ``<name>-base`` and the adapter as the model's name."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from forge_cli.config.compose import compose
from forge_cli.errors import UserError
from forge_cli.serve.adapter import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    AdapterServing,
    identity_adapter,
    is_adapter_dir,
    lora_shapes,
    served_rank,
    write_zero_safetensors,
)
from forge_cli.train.local import STATE_FILE, LocalTrainer
from forge_cli.train.sample import Sample
from tests.requires import module, requires

torch = module("torch", "core")  # with peft: forge's [train] extra


def _model_dir() -> Path:
    from forge_cli.serve.prepare import default_model_dir

    requires("model")
    return default_model_dir()


def _trainer(*overrides: str) -> LocalTrainer:
    # float32: these tests compare adapters with merged weights exactly (bf16 rounds a small update away)
    exp = compose(["trainer.learning_rate=1e-3", "trainer.lora={rank:8,alpha:16}", "trainer.precision=float32",
                   *overrides]).experiment
    return LocalTrainer(_model_dir(), exp.trainer, exp.algo)


def _samples() -> list[Sample]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(_model_dir())
    out = []
    for answer, advantage, rid in (("```bash\necho hi > a.txt\n```", 1.0, "good"), ("I cannot do that.", -1.0, "bad")):
        prompt_ids = tokenizer("Task: create a.txt containing hi.\n")["input_ids"]
        answer_ids = tokenizer(answer)["input_ids"]
        out.append(Sample(rollout_id=rid, group_id="g", task_id="t", segment=0, prompt_ids=prompt_ids,
                          response_ids=answer_ids, loss_mask=[1] * len(answer_ids),
                          rollout_logprobs=[0.0] * len(answer_ids), reward=max(advantage, 0.0), advantage=advantage))
    return out


def _logprobs(trainer: LocalTrainer, samples: list[Sample]) -> torch.Tensor:
    with torch.no_grad():
        return trainer.logprobs(samples)[0]


def test_served_rank_rounds_up_to_what_vllm_accepts() -> None:
    assert [served_rank(r) for r in (1, 2, 8, 9, 16, 17, 300, 512)] == [1, 8, 8, 16, 16, 32, 320, 512]
    with pytest.raises(UserError, match="exceeds"):
        served_rank(513)


def test_zero_safetensors_layout(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    path = tmp_path / "z.safetensors"
    write_zero_safetensors(path, {"b": [2, 3], "a": [5]})
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + size])
    # name order; F32: a = 5 x 4 = 20 bytes, b = 6 x 4 = 24 bytes; header padded to a multiple of 8
    assert header["a"] == {"dtype": "F32", "shape": [5], "data_offsets": [0, 20]}
    assert header["b"] == {"dtype": "F32", "shape": [2, 3], "data_offsets": [20, 44]}
    assert size % 8 == 0 and len(raw) == 8 + size + 44
    tensors = load_file(path)
    assert tensors["b"].shape == (2, 3) and not tensors["a"].any() and not tensors["b"].any()


def test_identity_adapter_shapes_and_peft_reads_it_as_the_base() -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    # SmolLM2-135M: hidden 576, 9 heads x 64, 3 KV heads x 64 = 192, MLP 1536, 30 layers
    shapes = lora_shapes(_model_dir(), 8, ["q_proj", "k_proj", "down_proj"])
    assert len(shapes) == 30 * 3 * 2
    layer = "base_model.model.model.layers.7"
    assert shapes[f"{layer}.self_attn.q_proj.lora_A.weight"] == [8, 576]
    assert shapes[f"{layer}.self_attn.q_proj.lora_B.weight"] == [576, 8]
    assert shapes[f"{layer}.self_attn.k_proj.lora_B.weight"] == [192, 8]
    assert shapes[f"{layer}.mlp.down_proj.lora_A.weight"] == [8, 1536]
    with pytest.raises(UserError, match="matches"):
        lora_shapes(_model_dir(), 8, ["nope_proj"])

    adapter = identity_adapter(_model_dir(), 8, 16, ["q_proj", "v_proj"])
    assert is_adapter_dir(adapter) and json.loads((adapter / ADAPTER_CONFIG).read_text())["r"] == 8
    assert identity_adapter(_model_dir(), 8, 16, ["v_proj", "q_proj"]) == adapter, "written once, reused"
    base = AutoModelForCausalLM.from_pretrained(_model_dir(), dtype=torch.float32)
    ids = torch.tensor([[1, 504, 3458, 282, 4649]])
    with torch.no_grad():
        plain = base(input_ids=ids).logits
        served = PeftModel.from_pretrained(base, adapter)(input_ids=ids).logits
    assert torch.equal(plain, served)


def test_lora_launch_serves_the_adapter_under_the_model_name(tmp_path: Path) -> None:
    from forge_cli.config.schema import SmolModel
    from forge_cli.serve import resolve_model
    from forge_cli.serve.server import build_launch

    model = compose([]).experiment.model
    assert isinstance(model, SmolModel)
    launch = build_launch(model, resolve_model(model), 8123, adapter=AdapterServing(tmp_path, 12))
    argv = launch.argv
    assert argv[argv.index("--served-model-name") + 1] == "policy-base" and argv.count("--served-model-name") == 1
    assert argv[argv.index("--lora-modules") + 1] == f"policy={tmp_path}"
    assert argv[argv.index("--max-lora-rank") + 1] == "16" and "--enable-lora" in argv
    assert launch.env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True" and launch.served_name == "policy"


def test_lora_trains_only_the_adapters_against_the_base_reference() -> None:
    trainer = _trainer("algo.kl_coef=0.1")
    samples = _samples()
    lora = {name for name, _ in trainer.model.named_parameters() if "lora_" in name}
    trainable = {name for name, p in trainer.model.named_parameters() if p.requires_grad}
    assert trainable == lora and len(lora) == 30 * 7 * 2, "A and B of 7 linear layers in 30 layers, nothing else"
    in_adamw = sum(len(group["params"]) for group in trainer.optimizer.param_groups)
    assert in_adamw == len(lora)
    start = _logprobs(trainer, samples)
    for row, sample in enumerate(samples):
        sample.rollout_logprobs = start[row, :len(sample.response_ids)].tolist()
    before = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    metrics = trainer.train_step(samples)
    after = trainer.model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    # B starts at zero, so A's first gradient is zero too: the first step moves every B and nothing else
    assert changed == {k for k in before if "lora_B" in k}
    assert metrics["logprob_abs_delta_max"] < 1e-4, "the fresh adapter is the base model exactly"
    moved = _logprobs(trainer, samples)
    mask = torch.zeros_like(moved)
    for row, sample in enumerate(samples):
        mask[row, :len(sample.response_ids)] = 1
    good, bad = ((moved - start) * mask).sum(-1).tolist()
    assert good > 0 > bad, (good, bad)
    # the KL reference is the base: the same module with its adapter disabled, equal to the step-0 policy
    assert torch.allclose(trainer.reference_logprobs(samples) * mask, start * mask, atol=1e-5)
    assert trainer.reference is None, "no second copy of the model"


def test_lora_checkpoints_hold_the_adapter_resume_and_merge(tmp_path: Path) -> None:
    from forge_cli.train.lora import merge_adapter

    trainer = _trainer()
    samples = _samples()
    trainer.train_step(samples)
    trainer.train_step(samples)
    checkpoint = tmp_path / "step-2"
    trainer.save(checkpoint)
    names = {p.name for p in checkpoint.iterdir()}
    assert {ADAPTER_CONFIG, ADAPTER_WEIGHTS, "tokenizer.json", "chat_template.jinja", STATE_FILE} <= names
    assert "config.json" not in names and "model.safetensors" not in names
    config = json.loads((checkpoint / ADAPTER_CONFIG).read_text())
    assert (config["r"], config["lora_alpha"], config["base_model_name_or_path"]) == (8, 16, str(_model_dir()))
    exp = compose(["trainer.precision=float32"]).experiment
    merged = LocalTrainer(merge_adapter(checkpoint, tmp_path / "merged"), exp.trainer, exp.algo)
    assert torch.allclose(_logprobs(merged, samples), _logprobs(trainer, samples), atol=1e-4), "merged = served"

    again = _trainer()
    again.load(checkpoint)
    assert again.steps == 2
    assert torch.allclose(_logprobs(again, samples), _logprobs(trainer, samples), atol=1e-5)
    saved, restored = trainer.optimizer.state_dict(), again.optimizer.state_dict()
    assert len(restored["state"]) == len(saved["state"]) == 30 * 7 * 2
    assert all(torch.equal(saved["state"][i]["exp_avg_sq"], restored["state"][i]["exp_avg_sq"])
               for i in saved["state"])
    # the next step continues identically from the restored adapter and AdamW moments
    trainer.train_step(samples)
    again.train_step(samples)
    assert torch.allclose(_logprobs(again, samples), _logprobs(trainer, samples), atol=1e-5)

    with pytest.raises(UserError, match="rank 8") as wrong_rank:
        _trainer("trainer.lora={rank:16}").load(checkpoint)
    assert wrong_rank.value.exit_code == 2
    with pytest.raises(UserError, match="holds a LoRA adapter") as wrong_kind:
        merged.load(checkpoint)
    assert wrong_kind.value.exit_code == 2


def test_an_adapter_checkpoint_as_model_path_serves_base_plus_adapter(tmp_path: Path) -> None:
    from forge_cli.config.schema import VllmModel
    from forge_cli.serve import resolve_model
    from forge_cli.serve.server import build_launch

    adapter = identity_adapter(_model_dir(), 8, 16, ["q_proj", "v_proj"])
    model = compose(["model=vllm", f"model.path={adapter}"]).experiment.model
    assert isinstance(model, VllmModel)
    prepared = resolve_model(model)
    assert (prepared.path, prepared.base, prepared.weights) == (adapter, _model_dir(), _model_dir())
    argv = build_launch(model, prepared, 8123).argv
    assert argv[argv.index("--model") + 1] == argv[argv.index("--tokenizer") + 1] == str(_model_dir())
    assert argv[argv.index("--lora-modules") + 1] == f"policy={adapter}"
    assert argv[argv.index("--max-lora-rank") + 1] == "8"
    (tmp_path / ADAPTER_CONFIG).write_text(json.dumps({"peft_type": "LORA", "r": 8,
                                                      "base_model_name_or_path": "/nowhere"}))
    with pytest.raises(UserError, match="base model '/nowhere'"):
        resolve_model(compose(["model=vllm", f"model.path={tmp_path}"]).experiment.model)
