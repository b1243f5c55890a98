"""Where forge keeps its files: the shipped configs and the per-user cache (FORGE_HOME)."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def configs_dir() -> Path:
    """The shipped config groups: inside the wheel, or the repository's ``configs/``."""
    packaged = PACKAGE_DIR / "configs"
    return packaged if packaged.is_dir() else PACKAGE_DIR.parent / "configs"


def forge_home() -> Path:
    """Root of forge's cache: environments, prepared models, harness bundles, runs."""
    return Path(os.environ.get("FORGE_HOME", Path.home() / ".cache" / "forge")).expanduser()


def env_dir(name: str) -> Path:
    """A virtual environment that the setup script builds (``vllm``, ``mitmproxy``)."""
    return forge_home() / "envs" / name


def env_python(name: str) -> Path:
    return env_dir(name) / "bin" / "python"


def models_dir() -> Path:
    return forge_home() / "models"


def bundles_dir() -> Path:
    return forge_home() / "harnesses"
