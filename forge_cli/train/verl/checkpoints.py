"""veRL's actor checkpoints back to forge: a Hugging Face directory that ``forge serve`` / ``forge eval`` take as
``model.path``.

veRL 0.9.1 saves ``checkpoints/global_step_N/actor/`` (per-rank ``model_world_size_W_rank_R.pt`` shards,
``fsdp_config.json``, ``huggingface/`` with the config and tokenizer) and names the newest in
``checkpoints/latest_checkpointed_iteration.txt``. veRL's own model merger (``python -m verl.model_merger merge``,
run in veRL's environment) joins the shards into safetensors; forge then puts the policy's own tokenizer files and
tool chat template beside them (the ones forge served during training), so the merged model answers tool calls as
the trained one did. The merge writes into a temporary directory renamed into place: an interrupted merge leaves
nothing half-written under the target name.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from forge_cli.errors import UserError

# what forge copies from the policy's model directory (those present)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "generation_config.json", "vocab.json", "merges.txt")
MERGED_NAME = "hf"


def actor_dir(path: Path, step: int | None = None) -> Path:
    """The actor checkpoint ``path`` names: an actor directory itself, a ``global_step_N`` directory, a run's
    ``checkpoints/`` or the run directory (then ``step``, else the newest). UserError exit 2 when there is none."""
    path = path.expanduser().resolve()
    if (path / "fsdp_config.json").is_file() or path.name == "actor":
        return path
    if (path / "actor").is_dir():
        return path / "actor"
    root = path / "checkpoints" if (path / "checkpoints").is_dir() else path
    steps = sorted((int(p.name.removeprefix("global_step_")), p) for p in root.glob("global_step_*")
                   if p.name.removeprefix("global_step_").isdigit() and (p / "actor").is_dir())
    if not steps:
        raise UserError(f"{path}: no veRL actor checkpoint (global_step_N/actor) in it",
                        fix="give a run directory of forge train trainer=verl, its checkpoints/ or a global_step_N",
                        exit_code=2)
    if step is None:
        latest = root / "latest_checkpointed_iteration.txt"
        text = latest.read_text().strip() if latest.is_file() else ""
        step = int(text) if text.isdigit() and any(s == int(text) for s, _ in steps) else steps[-1][0]
    found = [p for s, p in steps if s == step]
    if not found:
        saved = ", ".join(str(s) for s, _ in steps)
        raise UserError(f"{root}: no checkpoint of step {step}", fix=f"steps saved: {saved}", exit_code=2)
    return found[0] / "actor"


def merge(actor: Path, model_dir: Path | None, python: Path, target: Path | None = None,
          backend: str = "fsdp") -> Path:
    """Merge ``actor`` into ``target`` (default: ``global_step_N/hf``) with veRL's model merger, then copy the
    policy's tokenizer files and chat template from ``model_dir``; returns the merged directory. UserError exit 1
    when veRL's merger fails (its last output line in the message)."""
    target = target if target is not None else actor.parent / MERGED_NAME
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    done = subprocess.run([str(python), "-m", "verl.model_merger", "merge", "--backend", backend, "--local_dir",
                           str(actor), "--target_dir", str(partial)], capture_output=True, text=True, check=False)
    if done.returncode != 0 or not (partial / "config.json").is_file():
        shutil.rmtree(partial, ignore_errors=True)
        last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        raise UserError(f"veRL's model merger failed on {actor}: {last}",
                        fix=f"{python} -m verl.model_merger merge --backend {backend} --local_dir {actor} "
                            f"--target_dir {target} (to see its whole output)")
    if model_dir is not None:
        for name in TOKENIZER_FILES:
            if (model_dir / name).is_file():
                shutil.copy2(model_dir / name, partial / name)
    if not any(partial.glob("*.safetensors")):
        shutil.rmtree(partial, ignore_errors=True)
        raise UserError(f"veRL's model merger wrote no safetensors for {actor}", fix="check veRL's checkpoint")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return target
