"""Golden-file comparison; set FORGE_UPDATE_GOLDEN=1 to rewrite the files after a deliberate change."""

from __future__ import annotations

import os
from pathlib import Path


def check_golden(path: Path, actual: str) -> None:
    if os.environ.get("FORGE_UPDATE_GOLDEN") == "1" or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual)
        if os.environ.get("FORGE_UPDATE_GOLDEN") != "1":
            raise AssertionError(f"{path} did not exist; written now - review it and re-run")
    assert actual == path.read_text(), f"{path} differs (FORGE_UPDATE_GOLDEN=1 rewrites it after review)"
