"""A user's option derived from the builtin react harness (another name, same package) installs."""

from __future__ import annotations

from pathlib import Path

import pytest

from forge_cli.config.compose import compose
from forge_cli.harness.bundles import install


def test_renamed_builtin_harness_installs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORGE_HOME", str(tmp_path / "home"))
    react = compose(["harness=react"]).experiment.harness
    derived = react.model_copy(update={"name": "react-short"})
    manifest = install(derived)
    assert (tmp_path / "home" / "harnesses" / "react-short" / "bin" / "forge-react").is_file()
    assert "forge-react" in manifest["version_output"]
