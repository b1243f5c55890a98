"""Write a deliberately changed copy of a HF checkpoint (runs in forge's vLLM env: needs torch).

    python perturb_checkpoint.py SRC_DIR DST_DIR

Adds seeded Gaussian noise (2x each tensor's std) to every MLP down-projection; everything else
(config, tokenizer, chat template) is copied unchanged.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


def main() -> None:
    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    dst.mkdir(parents=True, exist_ok=True)
    for path in src.iterdir():
        if path.is_file() and path.suffix != ".safetensors":
            shutil.copyfile(path, dst / path.name)
    generator = torch.Generator().manual_seed(0)
    for shard in sorted(src.glob("*.safetensors")):
        tensors = load_file(str(shard))
        changed = 0
        for name, tensor in tensors.items():
            if "mlp.down_proj" in name:
                noise = torch.randn(tensor.shape, generator=generator) * tensor.float().std() * 2
                tensors[name] = (tensor.float() + noise).to(tensor.dtype)
                changed += 1
        save_file(tensors, str(dst / shard.name), metadata={"format": "pt"})
        print(f"{shard.name}: perturbed {changed} tensors")


if __name__ == "__main__":
    main()
