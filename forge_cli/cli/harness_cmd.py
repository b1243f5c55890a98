"""``forge harness install | ls``: self-contained harness bundles that sandboxes mount read-only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from forge_cli.cli import harness_fingerprint_cmd
from forge_cli.cli.common import ConfigDir, JsonFlag

app = typer.Typer(help="Install and list harness bundles (the harness plus the runtime it needs); fingerprint a "
                  "harness's requests and check them for drift.",
                  no_args_is_help=True)


def human_size(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


@app.command("install")
def install(
    names: Annotated[list[str], typer.Argument(help="Harness name(s), e.g. pi codex claude-code.",
                                               show_default=False)],
    offline: Annotated[bool, typer.Option("--offline", help="Install from forge's download cache only.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Reinstall even when the pinned version is there.")] = False,
    binary: Annotated[Path | None, typer.Option(
        "--binary", help="The harness's program, for harnesses no registry carries (zeroclaw).")] = None,
    config_dir: ConfigDir = None,
    as_json: JsonFlag = False,
) -> None:
    """Install each harness's pinned packages and runtime into $FORGE_HOME/harnesses/<name>."""
    from rich.console import Console

    from forge_cli.harness.bundles import install as install_bundle
    from forge_cli.harness.bundles import load_harness

    harnesses = [load_harness(name, config_dir) for name in names]  # every name checked before any work
    console = Console(stderr=True, highlight=False)
    results: list[dict[str, Any]] = []
    for harness in harnesses:
        with console.status(f"installing {harness.name}") as status:
            def progress(message: str, _status: Any = status, _name: str = harness.name) -> None:
                _status.update(f"{_name}: {message}")

            manifest = install_bundle(harness, offline=offline, force=force, binary_path=binary, progress=progress)
        results.append(manifest)
        if not as_json:
            if manifest.get("already_installed"):
                console.print(f"{harness.name} {manifest.get('version')} is already installed "
                              "(--force reinstalls it)", markup=False)
            else:
                console.print(f"[green]installed[/] {harness.name} {manifest.get('version')}: "
                              f"{human_size(manifest['size_bytes'])}, {manifest['file_count']} files, "
                              f"{manifest['install_seconds']} s; {manifest['version_output']}")
    if as_json:
        typer.echo(json.dumps(results, indent=2))


@app.command("ls")
def ls(config_dir: ConfigDir = None, as_json: JsonFlag = False) -> None:
    """List every known harness: installed version, size and files, or how to install it."""
    from rich.console import Console
    from rich.table import Table

    from forge_cli.harness.bundles import installed_bundles, known_harnesses

    installed = {m["name"]: m for m in installed_bundles()}
    names = sorted(set(known_harnesses(config_dir)) | set(installed))
    if as_json:
        typer.echo(json.dumps([installed.get(n, {"name": n, "installed": False}) for n in names], indent=2))
        return
    from forge_cli.paths import bundles_dir

    console = Console(highlight=False)
    console.print(f"harness bundles in {bundles_dir()}", markup=False)
    table = Table(box=None, pad_edge=False)
    for column in ("harness", "version", "size", "files", "installed (UTC)"):
        table.add_column(column)
    missing = []
    for name in names:
        m = installed.get(name)
        if m is None:
            missing.append(name)
            table.add_row(name, "-", "-", "-", "not installed")
        else:
            when = str(m.get("installed_at", "?")).replace("T", " ")[:16]
            table.add_row(name, str(m.get("version")), human_size(m.get("size_bytes", 0)), str(m.get("file_count")),
                          when)
    console.print(table)
    if missing:
        console.print(f"install with: forge harness install {' '.join(missing)}", markup=False)


# the drift guard: forge harness fingerprint | check (harness_fingerprint_cmd.py)
app.command("fingerprint")(harness_fingerprint_cmd.fingerprint)
app.command("check")(harness_fingerprint_cmd.check)
