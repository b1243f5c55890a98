"""The ``forge`` command: one Typer app, sub-commands registered from their own modules."""

from __future__ import annotations

import sys

import typer

from forge_cli import __version__
from forge_cli.cli import (
    branch_cmd,
    browser_cmd,
    config_cmd,
    distill_cmd,
    doctor_cmd,
    eval_cmd,
    harness_cmd,
    image_cmd,
    k8s_cmd,
    model_cmd,
    osworld_cmd,
    proxy_cmd,
    rollout_cmd,
    samples_cmd,
    sandbox_cmd,
    serve_cmd,
    sft_cmd,
    traces_cmd,
    train_cmd,
)
from forge_cli.errors import ConfigError, UserError

app = typer.Typer(
    name="forge",
    help="Train LLM agents with RL inside the real harness they are deployed in.\n\n"
    "Experiments are composed from config groups with Hydra override syntax, e.g.\n\n"
    "  forge rollout --dry-run +harness=openclaw +env=osworld runtime=docker",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(config_cmd.app, name="config")
app.add_typer(harness_cmd.app, name="harness")
app.add_typer(sandbox_cmd.app, name="sandbox")
app.add_typer(image_cmd.app, name="image")
app.add_typer(k8s_cmd.app, name="k8s")
app.command("rollout")(rollout_cmd.rollout)
app.command("branch")(branch_cmd.branch)
app.command("eval")(eval_cmd.eval_)
app.command("train")(train_cmd.train)
app.command("distill")(distill_cmd.distill)
app.command("sft")(sft_cmd.sft)
app.command("doctor")(doctor_cmd.doctor)
app.command("proxy")(proxy_cmd.proxy)
app.add_typer(traces_cmd.app, name="traces")
app.add_typer(samples_cmd.app, name="samples")
app.command("serve")(serve_cmd.serve)
app.add_typer(model_cmd.app, name="model")
app.add_typer(browser_cmd.app, name="browser")
app.add_typer(osworld_cmd.app, name="osworld")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"forge {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
) -> None:
    """Train LLM agents with RL inside the real harness they are deployed in."""


def report(error: UserError) -> None:
    """Print a user error as one clear message (no traceback) on stderr."""
    from rich.console import Console

    console = Console(stderr=True, highlight=False, soft_wrap=True)
    if isinstance(error, ConfigError):
        console.print(f"[bold red]error:[/] invalid experiment ({len(error.problems)} problem(s)):")
        for problem in error.problems:
            console.print(f"  - {problem}", markup=False)
    else:
        console.print("[bold red]error:[/] ", end="")
        console.print(error.message, markup=False)
    if error.fix:
        console.print("[bold]fix:[/] ", end="")
        console.print(error.fix, markup=False)


def main() -> None:
    try:
        app()
    except UserError as error:
        report(error)
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
