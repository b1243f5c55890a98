"""``forge image build --builtin desktop``: the ``forge-desktop`` image from the Dockerfile shipped in ``image/``.

The container build reaches Debian's archive but not PyPI, so the few pure-Python wheels the image needs
(``image/wheels.txt``: pyautogui and its dependencies) are built first on this machine with forge's own pip into a
temporary copy of the build context.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from forge_cli.runtime.images import build_wheels

IMAGE_DIR = Path(__file__).resolve().parent / "image"


def prepare_desktop_context(context: Path, echo: Callable[[str], None] | None) -> Path:
    """Write the desktop image's build context into the empty directory ``context``; returns its Dockerfile.
    UserError exit 1 when pip cannot build the wheels."""
    shutil.copytree(IMAGE_DIR, context, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("wheels", "__pycache__", "*.pyc"))
    wheels = context / "wheels"
    wheels.mkdir()
    build_wheels(["--no-deps", "-r", str(context / "wheels.txt")], wheels, "the desktop image (image/wheels.txt)",
                 echo)
    return context / "Dockerfile"
