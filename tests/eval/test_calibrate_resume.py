"""benchmarks/calibrate_builtin.py continues an interrupted split: the newest run directory of that split made with
the same harness, trials and temperature, never one made with other settings."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from types import ModuleType

import yaml

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "calibrate_builtin.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("calibrate_builtin", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(root: Path, name: str, split: str, trials: int, temperature: float = 0.3, harness: str = "react") -> Path:
    run_dir = root / name
    run_dir.mkdir()
    config = {"harness": {"name": harness}, "env": {"split": split}, "eval": {"trials": trials,
                                                                             "temperature": temperature}}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    return run_dir


def test_the_newest_matching_run_is_continued(tmp_path: Path) -> None:
    calibrate = _script()
    args = argparse.Namespace(output_dir=str(tmp_path), harness="react", temperature=0.3)
    assert calibrate.earlier_run("train", 2, args) is None
    _run(tmp_path, "calibrate-train-20261204-100000-1", "train", 2)
    newest = _run(tmp_path, "calibrate-train-20261204-110000-2", "train", 2)
    _run(tmp_path, "calibrate-train-20261204-120000-3", "train", 3)  # other trials
    _run(tmp_path, "calibrate-train-20261204-130000-4", "train", 2, temperature=0.7)  # other temperature
    _run(tmp_path, "calibrate-train-20261204-140000-5", "train", 2, harness="pi")  # other harness
    (tmp_path / "calibrate-train-20261204-150000-6").mkdir()  # no config.yaml: not a run
    assert calibrate.earlier_run("train", 2, args) == newest
    assert calibrate.earlier_run("val", 2, args) is None
