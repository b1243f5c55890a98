"""Building environment images on the local docker daemon (no registry: FROM must name a local image)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from forge_cli.runtime.base import SandboxConfigError
from forge_cli.runtime.docker import client_for, docker_errors


def build_image(runtime: Any, tag: str, context: Path, dockerfile: Path,
                echo: Callable[[str], None] | None = None) -> str:
    """Build ``tag`` from ``dockerfile`` in ``context`` with host networking; returns the image id."""
    import docker.errors

    client = client_for(runtime)
    lines: list[str] = []
    with docker_errors(f"building image {tag}"):
        try:
            stream = client.api.build(path=str(context), dockerfile=str(dockerfile.resolve()), tag=tag, rm=True,
                                      forcerm=True, pull=False, network_mode="host", decode=True)
            image_id = None
            for chunk in stream:
                if "error" in chunk:
                    raise docker.errors.BuildError(chunk["error"], lines)
                text = chunk.get("stream", "").rstrip()
                if text:
                    lines.append(text)
                    if echo is not None:
                        echo(text)
                if "aux" in chunk and "ID" in chunk["aux"]:
                    image_id = chunk["aux"]["ID"]
        except docker.errors.BuildError as error:
            tail = "\n".join(lines[-5:])
            raise SandboxConfigError(f"building image {tag} failed: {error.msg}" + (f"\n{tail}" if tail else ""),
                                     "FROM must name an image on this daemon (forge-base:bookworm from "
                                     "scripts/base-image.sh); nothing is pulled from a registry") from error
    if image_id is None:
        image_id = str(client.api.inspect_image(tag)["Id"])
    return image_id
