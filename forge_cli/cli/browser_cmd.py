"""``forge browser install|check``: what web tasks (``env=miniwob``) need beside the harness: Chromium and the
pinned ``@playwright/mcp`` that gives every harness its browser tools."""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(help="The browser web tasks run in (Chromium) and their browser tools (@playwright/mcp).",
                  no_args_is_help=True)


@app.command("install")
def install(
    offline: Annotated[bool, typer.Option(help="Install from forge's npm cache only.")] = False,
) -> None:
    """Install the pinned @playwright/mcp (with forge's Node runtime) and check that Chromium is there."""
    from forge_cli.browser import playwright_mcp
    from forge_cli.browser.chromium import chromium_path

    data = playwright_mcp.ensure_installed(offline=offline)
    typer.echo(f"{data['package']}@{data['version']} in {playwright_mcp.install_dir()} "
               f"(node {data['node_version']}; integrity {data['packages'][data['package']]['integrity'][:23]}...)")
    typer.echo(f"chromium: {chromium_path()}")


@app.command("check")
def check() -> None:
    """Say whether Chromium and @playwright/mcp are installed (exit 1 when one is missing, with the fix)."""
    from forge_cli.browser import playwright_mcp
    from forge_cli.browser.chromium import chromium_path
    from forge_cli.errors import UserError

    typer.echo(f"chromium: {chromium_path()}")
    if playwright_mcp.manifest() is None:
        raise UserError(f"{playwright_mcp.PACKAGE}@{playwright_mcp.VERSION} is not installed",
                        fix="forge browser install")
    typer.echo(f"{playwright_mcp.PACKAGE}@{playwright_mcp.VERSION}: {playwright_mcp.install_dir()}")
