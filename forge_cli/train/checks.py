"""``forge train``'s checks of its input, before anything starts (the dry run included): bad input exits 2 with one
message and its fix.

* **One key for the group size.** A group is ``algo.group_size`` rollouts of one task; ``rollout.samples_per_task``
  (what ``forge rollout`` and ``forge eval`` use) follows it. Given both with different values, forge train refuses.
* **Overlong shaping fits.** ``algo.overlong_buffer_tokens`` lies inside the output limit
  (``model.max_output_tokens``), or DAPO's penalty has no meaning.
* **The checkpoint is this model's.** ``forge train --resume RUN_DIR`` loads the run's newest checkpoint into the
  experiment's model: a checkpoint of another architecture (``config.json``: model type, architectures, vocabulary,
  hidden, layer and head sizes) is refused, naming both.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from forge_cli.config.schema import Experiment, OpenAICompatibleModel, SmolModel
from forge_cli.errors import UserError

# config.json keys that must agree for a checkpoint to load into the experiment's model
ARCHITECTURE_KEYS = ("model_type", "architectures", "vocab_size", "hidden_size", "num_hidden_layers",
                     "num_attention_heads", "num_key_value_heads", "intermediate_size")


def override_keys(overrides: Sequence[str] | None) -> set[str]:
    """The dotted keys a list of Hydra overrides sets (``+``/``++``/``~`` prefixes dropped)."""
    return {o.split("=", 1)[0].lstrip("+~") for o in overrides or [] if "=" in o}


def group_size(exp: Experiment, data: dict[str, Any], overrides: Sequence[str] | None
               ) -> tuple[Experiment, dict[str, Any]]:
    """The experiment with ``rollout.samples_per_task`` equal to ``algo.group_size``: derived when the user did not
    set it, a UserError (exit 2) when both were given and differ."""
    size, samples = exp.algo.group_size, exp.rollout.samples_per_task
    if samples == size:
        return exp, data
    if "rollout.samples_per_task" in override_keys(overrides):
        raise UserError(f"rollout.samples_per_task={samples} conflicts with algo.group_size={size}: forge train's "
                        f"group is algo.group_size rollouts of one task, and rollout.samples_per_task follows it",
                        fix=f"give one of them: algo.group_size={samples}, or drop rollout.samples_per_task",
                        exit_code=2)
    exp = exp.model_copy(update={"rollout": exp.rollout.model_copy(update={"samples_per_task": size})})
    data = {**data, "rollout": {**data.get("rollout", {}), "samples_per_task": size}}
    return exp, data


def overlong_fits(exp: Experiment) -> None:
    """``algo.overlong_buffer_tokens`` within ``model.max_output_tokens`` (UserError exit 2 otherwise)."""
    buffer, limit = exp.algo.overlong_buffer_tokens, exp.model.max_output_tokens
    if buffer > limit:
        raise UserError(f"algo.overlong_buffer_tokens={buffer} does not fit the output limit model.max_output_tokens="
                        f"{limit}: DAPO's overlong penalty grows over the last overlong_buffer_tokens tokens before "
                        f"the limit", fix=f"algo.overlong_buffer_tokens={limit // 5} (a fifth of the limit, as DAPO), "
                                          f"or 0 to turn the shaping off", exit_code=2)


def model_config(exp: Experiment) -> tuple[str, dict[str, Any] | None]:
    """The experiment's model as people name it, and its ``config.json`` (None when it is not there yet: the
    default model before its first conversion)."""
    model = exp.model
    if isinstance(model, OpenAICompatibleModel):
        return model.model, None
    if isinstance(model, SmolModel) and model.path is None:
        from forge_cli.serve.prepare import default_model_dir

        path = default_model_dir()
        name = f"model={model.source} ({path})"
    else:
        path = Path(str(model.path)).expanduser()
        name = f"model.path={model.path}"
    config = path / "config.json"
    return name, _read_json(config) if config.is_file() else None


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def describe(config: dict[str, Any]) -> str:
    """``LlamaForCausalLM (llama; vocab 49152, hidden 576, 30 layers, 9 heads)``."""
    arch = ",".join(config.get("architectures") or []) or "?"
    return (f"{arch} ({config.get('model_type', '?')}; vocab {config.get('vocab_size', '?')}, hidden "
            f"{config.get('hidden_size', '?')}, {config.get('num_hidden_layers', '?')} layers, "
            f"{config.get('num_attention_heads', '?')} heads)")


def resume_checkpoint_matches(exp: Experiment, run_dir: Path) -> None:
    """The newest checkpoint of ``run_dir`` is a checkpoint of the experiment's model (UserError exit 2 otherwise,
    naming both). Nothing to check without a checkpoint with a ``config.json`` (an adapter-only checkpoint has
    none) or before the default model is converted."""
    from forge_cli.train.local import iter_checkpoints

    checkpoints = [p for p in iter_checkpoints(run_dir / "checkpoints") if (p / "config.json").is_file()]
    if not checkpoints:
        return
    newest = checkpoints[-1]
    theirs = _read_json(newest / "config.json")
    name, ours = model_config(exp)
    if theirs is None or ours is None:
        return
    differ = [k for k in ARCHITECTURE_KEYS if k in theirs and k in ours and theirs[k] != ours[k]]
    if differ:
        raise UserError(f"--resume: checkpoint {newest} is a {describe(theirs)}, but the experiment's model {name} is "
                        f"a {describe(ours)} (they differ in {', '.join(differ)}): its weights cannot be loaded "
                        f"into this model", fix=f"resume with the model the run trained (model settings in "
                                                f"{run_dir / 'config.yaml'}), or start a new run", exit_code=2)
