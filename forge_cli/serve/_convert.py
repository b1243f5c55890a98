"""Convert a GGUF checkpoint to a bf16 safetensors Hugging Face directory, then check the result.

Runs as a script in forge's vLLM environment (transformers + gguf live there, not in forge's own):

    <vllm env>/bin/python _convert.py GGUF_FILE OUT_DIR CHAT_TEMPLATE

It imports nothing from forge. It writes into OUT_DIR (which the caller then renames into place),
prints one JSON line with what it verified, and never touches a hub (HF_HUB_OFFLINE=1).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def convert(gguf: Path, out: Path, template: str) -> dict[str, object]:
    """Load ``gguf`` dequantized, save bf16 safetensors + tokenizer + chat template into ``out``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer: Any = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model: Any = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.bfloat16)
    # save_pretrained refuses a GGUF-quantized model until the quantizer markers are cleared
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config._name_or_path = out.name
    bad = [name for name, p in model.named_parameters() if p.dtype != torch.bfloat16]
    if bad:
        raise SystemExit(f"conversion left non-bf16 parameters (still quantized?): {bad[:5]}")
    tokenizer.chat_template = template
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    (out / "chat_template.jinja").write_text(template)
    return {"parameters": sum(p.numel() for p in model.parameters())}


def verify(out: Path) -> dict[str, object]:
    """Reload the saved directory with transformers alone and run a tiny greedy generation."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(str(out))
    if getattr(config, "quantization_config", None):
        raise SystemExit("saved config still has a quantization_config")
    tokenizer: Any = AutoTokenizer.from_pretrained(str(out))
    model: Any = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.bfloat16)
    tools = [{"type": "function", "function": {"name": "bash", "description": "run a command",
                                               "parameters": {"type": "object", "properties": {}}}}]
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tools=tools, tokenize=False,
                                             add_generation_prompt=True)
    if "<tools>" not in rendered or '"name": "bash"' not in rendered:
        raise SystemExit("saved chat template does not render tools")
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                           tokenize=False, add_generation_prompt=True)
    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        generated = model.generate(**ids, max_new_tokens=12, do_sample=False)
    answer = tokenizer.decode(generated[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    if not answer.strip():
        raise SystemExit("the converted model generated nothing")
    return {"model_type": config.model_type, "vocab_size": config.vocab_size, "answer": answer.strip()}


def main() -> None:
    gguf, out, template = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    result = convert(gguf, out, template.read_text())
    result.update(verify(out))
    print("FORGE_RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
