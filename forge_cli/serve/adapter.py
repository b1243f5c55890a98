"""LoRA adapters on the policy server: how forge serves a base model with an adapter, and the adapter it starts from.

A server forge starts for a LoRA adapter (``forge serve model.path=ADAPTER_CHECKPOINT``, or ``forge train`` with
``trainer.lora`` set) serves the base weights under ``<model.served_name>-base`` and the adapter under
``model.served_name`` itself, so every client (the capture proxy forwards ``model.served_name``) talks to the
adapter without knowing it is one::

    --served-model-name policy-base --enable-lora --max-lora-rank R --max-loras 1 --lora-modules policy=DIR
    VLLM_ALLOW_RUNTIME_LORA_UPDATING=True     # /v1/load_lora_adapter, used by forge_cli.serve.weights

vLLM 0.32's CPU backend serves LoRA (its PyTorch punica ops); measured here on SmolLM2-135M in float32, the served
adapter's logprobs equal peft's to ~1e-5. A training run has no adapter yet when the server starts: it starts on
:func:`identity_adapter`, a PEFT adapter whose A and B are zero (the base model exactly; peft's own initial adapter
has B = 0 too, so the first rollouts see the same policy the trainer starts from), written from the base
checkpoint's safetensors headers without loading any weights.

A LoRA checkpoint (PEFT format: ``adapter_config.json`` + ``adapter_model.safetensors``, no ``config.json``) names
its base in ``base_model_name_or_path``: the local directory the trainer loaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forge_cli.errors import UserError
from forge_cli.paths import forge_home

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
# the ranks vLLM 0.32 accepts for --max-lora-rank (vllm/config/lora.py: MaxLoRARanks)
VLLM_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
BASE_SUFFIX = "-base"
_DTYPE_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8}


def is_adapter_dir(path: Path | str) -> bool:
    """A PEFT adapter directory (adapter_config.json, no config.json of a full model)."""
    directory = Path(path)
    return (directory / ADAPTER_CONFIG).is_file() and not (directory / "config.json").is_file()


def adapter_config(path: Path | str) -> dict[str, Any]:
    try:
        config = json.loads((Path(path) / ADAPTER_CONFIG).read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}/{ADAPTER_CONFIG} is not readable JSON ({exc})") from None
    if not isinstance(config, dict) or config.get("peft_type", "LORA") != "LORA" or "r" not in config:
        raise UserError(f"{path} is not a LoRA adapter (adapter_config.json needs peft_type LORA and r)")
    return config


def adapter_base(path: Path | str) -> Path:
    """The local base model directory an adapter checkpoint was trained on."""
    base = adapter_config(path).get("base_model_name_or_path") or ""
    directory = Path(base).expanduser()
    if not base or not (directory / "config.json").is_file():
        raise UserError(f"LoRA adapter {path}: its base model {base!r} is not a local Hugging Face directory",
                        fix=f"set base_model_name_or_path in {Path(path) / ADAPTER_CONFIG} to the base model's "
                            "directory (the one it was trained on)")
    return directory.resolve()


def served_rank(rank: int) -> int:
    """The smallest ``--max-lora-rank`` vLLM accepts that holds ``rank``."""
    for allowed in VLLM_RANKS:
        if allowed >= rank:
            return allowed
    raise UserError(f"LoRA rank {rank} exceeds the largest vLLM serves ({VLLM_RANKS[-1]})",
                    fix=f"set trainer.lora.rank<={VLLM_RANKS[-1]}")


@dataclass(frozen=True)
class AdapterServing:
    """The adapter a server starts with (served under the model's name) and the rank vLLM must hold."""

    path: Path
    rank: int


def lora_launch(served_name: str, serving: AdapterServing) -> tuple[list[str], dict[str, str]]:
    """vLLM arguments and environment: the base as ``<name>-base``, the adapter as ``<name>``, runtime reloads."""
    argv = ["--served-model-name", served_name + BASE_SUFFIX, "--enable-lora",
            "--max-lora-rank", str(served_rank(serving.rank)), "--max-loras", "1",
            "--lora-modules", f"{served_name}={serving.path}"]
    return argv, {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}


def safetensors_shapes(model_dir: Path) -> dict[str, list[int]]:
    """Tensor name -> shape of every ``*.safetensors`` file in ``model_dir``, read from the headers only."""
    shapes: dict[str, list[int]] = {}
    for path in sorted(model_dir.glob("*.safetensors")):
        with path.open("rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
        shapes.update({k: list(v["shape"]) for k, v in header.items() if k != "__metadata__"})
    if not shapes:
        raise UserError(f"{model_dir} holds no *.safetensors weights: LoRA serving needs them")
    return shapes


def lora_shapes(model_dir: Path, rank: int, target_modules: list[str]) -> dict[str, list[int]]:
    """PEFT's tensor names and shapes of a rank-``rank`` adapter on ``target_modules``: for a linear weight
    ``W`` [out, in] at ``M.weight``, ``base_model.model.M.lora_A.weight`` [rank, in] and ``...lora_B.weight``
    [out, rank]. A target matches a module whose name is it or ends with ``.<target>`` (peft's rule)."""
    out: dict[str, list[int]] = {}
    for name, shape in safetensors_shapes(model_dir).items():
        module = name.removesuffix(".weight")
        if name == module or len(shape) != 2:
            continue
        if any(module == t or module.endswith("." + t) for t in target_modules):
            prefix = f"base_model.model.{module}"
            out[f"{prefix}.lora_A.weight"] = [rank, shape[1]]
            out[f"{prefix}.lora_B.weight"] = [shape[0], rank]
    if not out:
        raise UserError(f"no linear layer of {model_dir} matches trainer.lora.target_modules={target_modules}",
                        fix="name the model's linear layers, e.g. [q_proj, v_proj]")
    return out


def write_zero_safetensors(path: Path, shapes: dict[str, list[int]], dtype: str = "F32") -> None:
    """A safetensors file of zero tensors: the header (8-byte little-endian length, JSON padded to 8 bytes with
    spaces), then the tensors back to back in name order (the zeros are a sparse extension of the file)."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name in sorted(shapes):
        n = _DTYPE_BYTES[dtype]
        for dim in shapes[name]:
            n *= dim
        header[name] = {"dtype": dtype, "shape": shapes[name], "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        f.truncate(8 + len(blob) + offset)


def identity_adapter(base: Path, rank: int, alpha: int, target_modules: list[str]) -> Path:
    """A PEFT adapter on ``base`` that changes nothing (A = B = 0), kept under ``$FORGE_HOME/adapters/``."""
    base = base.resolve()
    key = json.dumps([str(base), rank, alpha, sorted(target_modules)]).encode()
    target = forge_home() / "adapters" / f"identity-{hashlib.sha256(key).hexdigest()[:16]}"
    if (target / ADAPTER_WEIGHTS).is_file():
        return target
    staging = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    write_zero_safetensors(staging / ADAPTER_WEIGHTS, lora_shapes(base, rank, target_modules))
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": str(base), "r": rank,
              "lora_alpha": alpha, "lora_dropout": 0.0, "target_modules": sorted(target_modules), "bias": "none",
              "use_rslora": False, "use_dora": False, "fan_in_fan_out": False, "modules_to_save": None,
              "inference_mode": True}
    (staging / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    try:
        staging.rename(target)
    except OSError:  # another forge process wrote it meanwhile
        shutil.rmtree(staging, ignore_errors=True)
        if not (target / ADAPTER_WEIGHTS).is_file():
            raise
    return target


def merge_adapter(adapter_dir: Path, out: Path) -> Path:
    """Full float32 weights of base + adapter (peft ``merge_and_unload``) as an HF directory ``out``: what a server
    that serves no adapter loads (``forge_cli.serve.weights``)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base: Any = AutoModelForCausalLM.from_pretrained(adapter_base(adapter_dir), dtype=torch.float32)
    merged = PeftModel.from_pretrained(base, adapter_dir, is_trainable=False).merge_and_unload()
    out.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(out, safe_serialization=True)
    return out
