"""``forge config show | groups``: the composed experiment and the options of each group."""

from __future__ import annotations

import json

import typer

from forge_cli.cli.common import ConfigDir, JsonFlag, Overrides, load

app = typer.Typer(help="Inspect composed experiments and the available config options.", no_args_is_help=True)


@app.command("show")
def show(overrides: Overrides = None, config_dir: ConfigDir = None, as_json: JsonFlag = False) -> None:
    """Print the composed, validated experiment as YAML."""
    import yaml

    composed = load(overrides, config_dir)
    data = composed.experiment.model_dump(mode="json")
    if as_json:
        typer.echo(json.dumps(data, indent=2))
    else:
        typer.echo(yaml.safe_dump(data, sort_keys=False, width=100), nl=False)


@app.command("groups")
def groups(config_dir: ConfigDir = None, as_json: JsonFlag = False) -> None:
    """List the options of every config group with a one-line description."""
    from forge_cli.config.compose import describe, group_options

    options = group_options(config_dir)
    table = {g: {name: describe(path) for name, path in opts.items()} for g, opts in options.items()}
    if as_json:
        typer.echo(json.dumps(table, indent=2))
        return
    from rich.console import Console

    console = Console(highlight=False)
    for group, entries in table.items():
        console.print(f"[bold]{group}[/]")
        width = max(len(n) for n in entries)
        for name, text in entries.items():
            console.print(f"  {name:<{width}}  {text}", markup=False)
