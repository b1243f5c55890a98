"""``forge image build --builtin desktop``: the ``forge-desktop`` image from the Dockerfile shipped in ``image/``.

The container build reaches Debian's archive but not PyPI, so the few pure-Python wheels the image needs
(``image/wheels.txt``: pyautogui and its dependencies) are built first on this machine with forge's own pip into a
temporary copy of the build context.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from forge_cli.errors import UserError

IMAGE_DIR = Path(__file__).resolve().parent / "image"


def prepare_desktop_context(context: Path, echo: Callable[[str], None] | None) -> Path:
    """Write the desktop image's build context into the empty directory ``context``; returns its Dockerfile.
    UserError exit 1 when pip cannot build the wheels."""
    shutil.copytree(IMAGE_DIR, context, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("wheels", "__pycache__", "*.pyc"))
    wheels = context / "wheels"
    wheels.mkdir()
    if echo is not None:
        echo("building the image's Python wheels (image/wheels.txt) with pip")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-r",
                           str(context / "wheels.txt"), "-w", str(wheels)], capture_output=True, text=True)
    if done.returncode != 0:
        raise UserError(f"pip could not build the desktop image's wheels: {done.stderr.strip()[-800:]}",
                        fix="check that PyPI is reachable (pip install works), then build again", exit_code=1)
    return context / "Dockerfile"
