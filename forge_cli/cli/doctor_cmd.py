"""``forge doctor``: is this machine ready for the experiment?"""

from __future__ import annotations

import json
from dataclasses import asdict

import typer

from forge_cli.cli.common import ConfigDir, JsonFlag, Overrides, load


def doctor(overrides: Overrides = None, config_dir: ConfigDir = None, as_json: JsonFlag = False) -> None:
    """Check each prerequisite of the composed experiment (vLLM, mitmdump, docker daemon or kube
    context, harness bundle, Node) and print the exact fix for what is missing. Exits 1 if any is."""
    from forge_cli.prerequisites import run_checks

    checks = run_checks(load(overrides, config_dir).experiment)
    if as_json:
        typer.echo(json.dumps([asdict(c) for c in checks], indent=2))
    else:
        from rich.console import Console

        console = Console(highlight=False)
        for c in checks:
            mark = "[green]ok[/]     " if c.ok else "[red]missing[/]"
            console.print(f"{mark} {c.name}: ", end="")
            console.print(c.detail, markup=False)
            if c.fix:
                console.print("          fix: ", end="")
                console.print(c.fix, markup=False)
    missing = [c.name for c in checks if not c.ok]
    if missing:
        typer.echo(f"error: {len(missing)} prerequisite(s) missing: {', '.join(missing)} (each fix is printed "
                   "above)", err=True)
        raise typer.Exit(1)
