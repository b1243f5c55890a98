"""Building environment images on the local docker daemon (no registry: FROM must name a local image)."""

from __future__ import annotations

import abc
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from forge_cli.errors import UserError
from forge_cli.paths import forge_home
from forge_cli.plugins import Registry
from forge_cli.runtime.base import SandboxConfigError
from forge_cli.runtime.docker import client_for, docker_errors

Echo = Callable[[str], None]


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


class BuiltinImage(abc.ABC):
    """An image forge builds from this checkout (``forge image build --builtin NAME``): the extension point of the
    images forge ships. A subclass names itself (``class Mine(BuiltinImage, name="mine")``) and gives its default
    ``tag``, a one-line ``summary`` and :meth:`prepare`, which writes the build context; :meth:`build` builds it on
    the local daemon (FROM a local image: nothing is pulled). forge's own live in ``*/builtin_image.py``; a package
    adds one through the entry-point group ``forge.builtin_images``.
    """

    name: ClassVar[str] = ""
    tag: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    # whether --harness NAME selects what goes into it (the bundles image)
    takes_harnesses: ClassVar[bool] = False

    def __init_subclass__(cls, name: str = "", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if name:
            cls.name = name
            BUILTIN_IMAGES.add(name, cls)

    def __init__(self, harnesses: Sequence[str] = ()) -> None:
        if harnesses and not self.takes_harnesses:
            raise UserError(f"--harness: the {self.name} image holds no harness bundles", exit_code=2)
        self.harnesses = list(harnesses)

    @abc.abstractmethod
    def prepare(self, context: Path, echo: Echo | None) -> Path:
        """Write the build context into the empty directory ``context``; return its Dockerfile."""

    def build(self, runtime: Any, tag: str | None = None, echo: Echo | None = None) -> str:
        """Build the image as ``tag`` (default: :attr:`tag`) on ``runtime``'s daemon; returns the image id."""
        with tempfile.TemporaryDirectory(prefix=f"forge-image-{self.name}-", dir=scratch_dir()) as tmp:
            context = Path(tmp) / "context"
            context.mkdir()
            dockerfile = self.prepare(context, echo)
            return build_image(runtime, tag or self.tag, context, dockerfile, echo=echo)


BUILTIN_IMAGES: Registry[type[BuiltinImage]] = Registry("builtin image", BuiltinImage, "forge.builtin_images",
                                                       own="*/builtin_image.py")


def builtin_image(name: str) -> type[BuiltinImage]:
    """The builtin image registered as ``name``; unknown: one message naming the registered ones (exit 2)."""
    try:
        return BUILTIN_IMAGES.get(name)
    except ValueError as error:
        raise UserError(f"--builtin: {error}", exit_code=2) from error


def scratch_dir() -> Path:
    """Where build contexts are assembled: under $FORGE_HOME, the file system of the harness bundles, so that
    they are hard-linked into a context instead of copied."""
    path = forge_home() / "tmp"
    path.mkdir(parents=True, exist_ok=True)
    return path


def build_wheels(args: Sequence[str], wheels: Path, what: str, echo: Echo | None) -> None:
    """``pip wheel ARGS`` into ``wheels`` with forge's own pip, on this machine: an image's build reaches Debian's
    archive but not PyPI. UserError exit 1 when pip cannot (PyPI out of reach)."""
    if echo is not None:
        echo(f"building the wheels of {what} with pip")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "-w", str(wheels), *args],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise UserError(f"pip could not build the wheels of {what}: {done.stderr.strip()[-800:]}",
                        fix="check that PyPI is reachable (pip install works), then build again", exit_code=1)
