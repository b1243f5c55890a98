"""One prerequisite check (``forge doctor``): what it looked at, ok or not, and the exact fix; and how a check reads
the packages installed in one of forge's environments (``~/.cache/forge/envs/<name>``) without running it.

A leaf: the checks of every part (``forge_cli.prerequisites`` and a trainer backend's own, named by its options
class's ``checks``) build on it without importing one another.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from forge_cli.paths import env_dir


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def site_packages(env: str) -> Path | None:
    """The site-packages directory of forge's environment ``env`` (None: not installed)."""
    found = sorted((env_dir(env) / "lib").glob("python3*/site-packages"))
    return found[0] if found else None


def dist_version(env: str, dist: str) -> str | None:
    """The version of distribution ``dist`` installed in forge's environment ``env`` (None: not there)."""
    site = site_packages(env)
    if site is None:
        return None
    for info in site.glob(f"{dist.replace('-', '_')}-*.dist-info"):
        return info.name.removesuffix(".dist-info").split("-", 1)[1]
    return None


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", text)[:3])
