"""``forge image build``: build an environment image, or one forge ships, on the local daemon (never pulls from a
registry); ``forge image builtins`` lists the ones forge ships."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="Build environment images for docker sandboxes, and the images forge ships.",
                  no_args_is_help=True)


@app.command("build")
def build(
    tag: Annotated[str | None, typer.Argument(
        help="Image name:tag to build, e.g. forge-env-swe:latest (with --builtin: that image's own tag unless given).",
        show_default=False)] = None,
    context: Annotated[Path, typer.Argument(help="Build context directory.")] = Path("."),
    builtin: Annotated[str | None, typer.Option("--builtin", help="Build an image forge ships instead: `controller` "
                                                "(forge and its proxy for the cluster: runtime.proxy_image), "
                                                "`bundles` (the harness bundles: runtime.bundle_image), `desktop` "
                                                "(OSWorld's desktop); forge image builtins lists them.",
                                                show_default=False)] = None,
    harness: Annotated[list[str] | None, typer.Option("--harness", help="With --builtin bundles: the bundle(s) to "
                                                      "put in (repeat; default: every installed one).",
                                                      show_default=False)] = None,
    file: Annotated[Path | None, typer.Option("--file", "-f", help="Dockerfile (default: CONTEXT/Dockerfile).")] = None,
    docker_host: Annotated[str | None, typer.Option(help="Docker daemon address.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the image id.")] = False,
) -> None:
    """Build TAG from a Dockerfile whose FROM names a local image (e.g. forge-base:bookworm), or an image forge
    ships (--builtin NAME). To run on a cluster, push the result to a registry its nodes pull from
    (docs/scale.md)."""
    from forge_cli.cli.runtime_common import load_runtime
    from forge_cli.errors import UserError
    from forge_cli.runtime.images import build_image, builtin_image

    echo = None if quiet else typer.echo
    if builtin is not None:
        image = builtin_image(builtin)(harness or ())
        runtime = load_runtime("docker", docker_host=docker_host)
        tag = tag or image.tag
        image_id = image.build(runtime, tag, echo)
        typer.echo(image_id if quiet else f"built {tag} ({image_id[:19]})")
        return
    if harness:
        raise UserError("--harness goes with --builtin bundles", exit_code=2)
    if tag is None:
        raise UserError("give the image's TAG (and its build context), or --builtin NAME", exit_code=2)
    dockerfile = file or context / "Dockerfile"
    if not context.is_dir():
        raise UserError(f"build context {context} is not a directory", exit_code=2)
    if not dockerfile.is_file():
        raise UserError(f"no Dockerfile at {dockerfile}", "pass one with --file", exit_code=2)
    runtime = load_runtime("docker", docker_host=docker_host)
    image_id = build_image(runtime, tag, context, dockerfile, echo=echo)
    typer.echo(image_id if quiet else f"built {tag} ({image_id[:19]})")


@app.command("builtins")
def builtins() -> None:
    """The images forge ships (forge image build --builtin NAME), with their default tags."""
    from forge_cli.runtime.images import BUILTIN_IMAGES

    BUILTIN_IMAGES.load_all()
    for name in BUILTIN_IMAGES.names():
        image = BUILTIN_IMAGES.get(name)
        typer.echo(f"{name:<12} {image.tag:<32} {image.summary}")
