"""``forge image build``: build an environment image on the local daemon (never pulls from a registry)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="Build environment images for docker sandboxes.", no_args_is_help=True)


@app.command("build")
def build(
    tag: Annotated[str | None, typer.Argument(
        help="Image name:tag to build, e.g. forge-env-swe:latest (with --builtin: default forge-desktop:bookworm).",
        show_default=False)] = None,
    context: Annotated[Path, typer.Argument(help="Build context directory.")] = Path("."),
    builtin: Annotated[str | None, typer.Option("--builtin", help="Build an image forge ships instead: `desktop` "
                                                "(OSWorld's desktop: Xvfb, the apps, forge's server; ~2.4 GB, "
                                                "10-20 minutes the first time).", show_default=False)] = None,
    file: Annotated[Path | None, typer.Option("--file", "-f", help="Dockerfile (default: CONTEXT/Dockerfile).")] = None,
    docker_host: Annotated[str | None, typer.Option(help="Docker daemon address.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the image id.")] = False,
) -> None:
    """Build TAG from a Dockerfile whose FROM names a local image (e.g. forge-base:bookworm), or an image forge
    ships (--builtin desktop)."""
    from forge_cli.cli.runtime_common import load_runtime
    from forge_cli.errors import UserError
    from forge_cli.runtime.images import build_image

    if builtin is not None:
        from forge_cli.desktop.build import BUILTIN_TAGS, build_desktop_image

        if builtin not in BUILTIN_TAGS:
            raise UserError(f"--builtin: unknown image '{builtin}'", fix=f"known: {', '.join(BUILTIN_TAGS)}",
                            exit_code=2)
        runtime = load_runtime("docker", docker_host=docker_host)
        tag = tag or BUILTIN_TAGS[builtin]
        image_id = build_desktop_image(runtime, tag, None if quiet else typer.echo)
        typer.echo(image_id if quiet else f"built {tag} ({image_id[:19]})")
        return
    if tag is None:
        raise UserError("give the image's TAG (and its build context), or --builtin desktop", exit_code=2)
    dockerfile = file or context / "Dockerfile"
    if not context.is_dir():
        raise UserError(f"build context {context} is not a directory", exit_code=2)
    if not dockerfile.is_file():
        raise UserError(f"no Dockerfile at {dockerfile}", "pass one with --file", exit_code=2)
    runtime = load_runtime("docker", docker_host=docker_host)
    image_id = build_image(runtime, tag, context, dockerfile, echo=None if quiet else typer.echo)
    typer.echo(image_id if quiet else f"built {tag} ({image_id[:19]})")
