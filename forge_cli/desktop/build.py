"""``forge image build --builtin desktop``: the ``forge-desktop`` image from the Dockerfile shipped in ``image/``.

The container build reaches Debian's archive but not PyPI, so the few pure-Python wheels the image needs
(``image/wheels.txt``: pyautogui and its dependencies) are built first on this machine with forge's own pip into a
temporary copy of the build context.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from forge_cli.errors import UserError

IMAGE_DIR = Path(__file__).resolve().parent / "image"
BUILTIN_TAGS = {"desktop": "forge-desktop:bookworm"}


def build_desktop_image(runtime: Any, tag: str, echo: Callable[[str], None] | None) -> str:
    """Build ``tag`` (normally forge-desktop:bookworm); returns the image id. UserError exit 1 when pip cannot
    build the wheels."""
    from forge_cli.runtime.images import build_image

    with tempfile.TemporaryDirectory(prefix="forge-desktop-build-") as tmp:
        context = Path(tmp) / "context"
        shutil.copytree(IMAGE_DIR, context, ignore=shutil.ignore_patterns("wheels", "__pycache__", "*.pyc"))
        wheels = context / "wheels"
        wheels.mkdir()
        if echo is not None:
            echo("building the image's Python wheels (image/wheels.txt) with pip")
        done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-r",
                               str(context / "wheels.txt"), "-w", str(wheels)], capture_output=True, text=True)
        if done.returncode != 0:
            raise UserError(f"pip could not build the desktop image's wheels: {done.stderr.strip()[-800:]}",
                            fix="check that PyPI is reachable (pip install works), then build again", exit_code=1)
        return build_image(runtime, tag, context, context / "Dockerfile", echo=echo)
