"""Baseline for benchmarks/serve.py: the same model through plain transformers ``generate``.

Runs in forge's vLLM environment (torch + transformers):

    python _hf_baseline.py MODEL_DIR MAX_TOKENS BATCH[,BATCH...] THREADS DTYPE

Prints one JSON line: load seconds, generated tokens/s per batch size (every sequence generates
exactly MAX_TOKENS tokens, like vLLM's ``ignore_eos``), and the seconds to load new weights
from the checkpoint's safetensors into the loaded model (``load_state_dict``).
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PROMPT = "Write a short story about a robot who learns to paint."


def main() -> None:
    model_dir, max_tokens, batches = sys.argv[1], int(sys.argv[2]), [int(b) for b in sys.argv[3].split(",")]
    threads, dtype_name = int(sys.argv[4]), sys.argv[5]
    import torch

    torch.set_num_threads(threads)
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype_name)).eval()
    load_s = time.perf_counter() - started
    text = tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}], tokenize=False,
                                         add_generation_prompt=True)
    result: dict[str, object] = {"load_s": load_s, "threads": torch.get_num_threads(), "dtype": dtype_name,
                                 "tok_s": {}}
    with torch.no_grad():
        model.generate(**tokenizer([text], return_tensors="pt"), max_new_tokens=4, do_sample=False)  # warm-up
        for batch in batches:
            inputs = tokenizer([text] * batch, return_tensors="pt", padding=True)
            started = time.perf_counter()
            out = model.generate(**inputs, max_new_tokens=max_tokens, min_new_tokens=max_tokens, do_sample=True,
                                 temperature=0.8, pad_token_id=tokenizer.pad_token_id)
            elapsed = time.perf_counter() - started
            generated = (out.shape[1] - inputs["input_ids"].shape[1]) * batch
            result["tok_s"][str(batch)] = generated / elapsed  # type: ignore[index]
        started = time.perf_counter()
        state = {}
        for name in sorted(os.listdir(model_dir)):
            if name.endswith(".safetensors"):
                state.update(load_file(os.path.join(model_dir, name)))
        model.load_state_dict(state, strict=False)
        result["update_s"] = time.perf_counter() - started
    print("FORGE_RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
