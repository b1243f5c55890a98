"""``forge image build --builtin desktop``: the image env=osworld runs each rollout's desktop in (``build.py``)."""

from __future__ import annotations

from pathlib import Path

from forge_cli.desktop.build import prepare_desktop_context
from forge_cli.desktop.container import DEFAULT_IMAGE
from forge_cli.runtime.images import BuiltinImage, Echo


class DesktopImage(BuiltinImage, name="desktop"):
    tag = DEFAULT_IMAGE
    summary = "OSWorld's desktop: Xvfb, the apps, forge's server (~2.4 GB, 10-20 minutes the first time)"

    def prepare(self, context: Path, echo: Echo | None) -> Path:
        return prepare_desktop_context(context, echo)
