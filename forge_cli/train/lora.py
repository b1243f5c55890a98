"""``trainer.lora``: the local trainer's LoRA adapters (peft).

The HF model is wrapped with peft's LoRA on ``trainer.lora.target_modules`` (rank ``rank``, scale
``alpha / rank``, dropout ``dropout`` on the adapter's input); every base weight is frozen, so only the adapter's
A and B matrices get gradients and AdamW state. peft starts B at zero: the first policy is the base model exactly.
The KL reference is the same model with the adapter disabled (``disable_adapter()``), not a second copy.

A checkpoint holds the adapter in PEFT's format (``adapter_config.json`` naming the base directory,
``adapter_model.safetensors``), the tokenizer and chat template, and the trainer state; the policy server loads
it at run time (``forge_cli/serve/weights.py``), ``forge serve model.path=CKPT`` serves base + adapter, and
:func:`forge_cli.serve.adapter.merge_adapter` folds it into full weights for a server that serves no adapter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from forge_cli.config.schema import LoraSettings
from forge_cli.errors import UserError
from forge_cli.serve.adapter import adapter_base, adapter_config, is_adapter_dir
from forge_cli.serve.adapter import merge_adapter as merge_adapter  # serving folds adapters in; re-exported


def peft_config(settings: LoraSettings) -> Any:
    from peft import LoraConfig

    return LoraConfig(r=settings.rank, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                      target_modules=list(settings.target_modules), bias="none", task_type="CAUSAL_LM")


def wrap(model: Any, settings: LoraSettings) -> Any:
    """``model`` with fresh LoRA adapters (B = 0); only the adapters are trainable."""
    from peft import get_peft_model

    try:
        return get_peft_model(model, peft_config(settings))
    except ValueError as exc:  # peft: "Target modules {...} not found in the base model"
        raise UserError(f"trainer.lora: {exc}", fix="name the model's linear layers in trainer.lora.target_modules, "
                                                    "e.g. [q_proj, v_proj]", exit_code=2) from None


def check_matches(directory: Path, settings: LoraSettings) -> None:
    """A UserError (exit 2) unless the adapter in ``directory`` has the rank, alpha and modules of ``settings``."""
    config = adapter_config(directory)
    saved = (int(config["r"]), float(config.get("lora_alpha", 8)), sorted(config.get("target_modules") or []))
    wanted = (settings.rank, float(settings.alpha), sorted(settings.target_modules))
    if saved != wanted:
        raise UserError(f"LoRA checkpoint {directory} has rank {saved[0]}, alpha {saved[1]:g} and target modules "
                        f"{saved[2]}; trainer.lora asks for rank {wanted[0]}, alpha {wanted[1]:g}, {wanted[2]}",
                        fix="set trainer.lora to the checkpoint's settings", exit_code=2)


def load_adapter(model: Any, directory: Path, trainable: bool = True) -> Any:
    """``model`` (the base) with the adapter saved in ``directory``."""
    from peft import PeftModel

    return PeftModel.from_pretrained(model, directory, is_trainable=trainable)


def trainable(model: Any) -> list[Any]:
    return [p for p in model.parameters() if p.requires_grad]


def base_directory(model_dir: Path) -> Path:
    """The full model directory under ``model_dir`` (itself, or an adapter checkpoint's base)."""
    return adapter_base(model_dir) if is_adapter_dir(model_dir) else model_dir
