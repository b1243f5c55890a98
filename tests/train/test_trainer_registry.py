"""Trainer backends register by name with options of their own (``forge_cli/config/training.py``): ``local`` and
``verl`` are two such backends, and a package adds a third through the ``forge.trainers`` entry-point group without
touching forge (a real distribution on ``PYTHONPATH``: its ``entry_points.txt`` read by ``importlib.metadata``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forge_cli.config.compose import compose
from forge_cli.config.training import TRAINERS, LocalTrainerConfig
from forge_cli.testing.trainer import check_trainer
from forge_cli.train.verl.options import VerlTrainerConfig
from tests.helpers import forge

PLUGIN = '''
import json
from pathlib import Path
from typing import ClassVar

from forge_cli.config.training import TrainerConfig


class ToyTrainerConfig(TrainerConfig, kind="toy"):
    runner: ClassVar[str] = "toy_trainer:run"
    toy_rounds: int = 3


def run(exp, data, *, fitted, context_note, resume, dry_run, as_json):
    print(json.dumps({"kind": exp.trainer.kind, "toy_rounds": exp.trainer.toy_rounds, "dry_run": dry_run,
                      "steps": exp.trainer.steps}))
'''


def _plugin(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "toy_trainer.py").write_text(PLUGIN)
    info = tmp_path / "toy_trainer-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-trainer\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[forge.trainers]\ntoy = toy_trainer:ToyTrainerConfig\n")
    return {"PYTHONPATH": str(tmp_path)}


def test_each_backend_has_its_own_options() -> None:
    local, verl = compose([]).experiment, compose(["trainer=verl", "trainer.n_gpus_per_node=2"]).experiment
    assert isinstance(local.trainer, LocalTrainerConfig) and isinstance(verl.trainer, VerlTrainerConfig)
    assert "n_gpus_per_node" not in LocalTrainerConfig.model_fields  # no veRL-only field in the local trainer's
    assert verl.model_dump(mode="json")["trainer"]["n_gpus_per_node"] == 2  # the backend's own fields are kept
    assert {"local", "verl"} <= set(TRAINERS)


def test_a_package_adds_a_trainer_backend(tmp_path: Path) -> None:
    env = _plugin(tmp_path)
    result = forge("train", "--dry-run", "trainer.kind=toy", "+trainer.toy_rounds=5", "trainer.steps=2",
                   f"run.output_dir={tmp_path / 'runs'}", env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"kind": "toy", "toy_rounds": 5, "dry_run": True,
                                                                  "steps": 2}


def test_unknown_backend_and_misplaced_option_are_exit_2(tmp_path: Path) -> None:
    unknown = forge("train", "--dry-run", "trainer.kind=nope", f"run.output_dir={tmp_path}", timeout=300)
    assert unknown.returncode == 2 and "no trainer backend named 'nope'" in unknown.stderr, unknown.stderr
    assert "registered: local, verl" in unknown.stderr and "Traceback" not in unknown.stderr
    misplaced = forge("train", "--dry-run", "trainer.kind=local", "+trainer.ray_address=ray://h:1",
                      f"run.output_dir={tmp_path}", timeout=300)
    assert misplaced.returncode == 2, misplaced.stderr
    assert "trainer.ray_address is an option of trainer=verl, not of trainer=local" in misplaced.stderr


def test_a_local_config_written_before_the_split_still_reads() -> None:
    """Run directories of earlier versions saved veRL's keys, at their defaults, in a local trainer's config
    (``--resume`` and ``forge eval --compare`` read them back)."""
    from forge_cli.config.schema import Experiment

    data = compose([]).experiment.model_dump(mode="json")
    data["trainer"].update(n_gpus_per_node=1, nnodes=1, strategy="fsdp", ray_address=None)
    exp = Experiment.model_validate(data)
    assert isinstance(exp.trainer, LocalTrainerConfig) and "nnodes" not in exp.model_dump()["trainer"]


DEFECTS = {
    "without a default": ("    toy_rounds: int = 3", "    toy_rounds: int"),
    "does not take forge train's arguments": ("def run(exp, data, *, fitted, context_note, resume, dry_run, as_json):",
                                              "def run(exp, data):"),
    "does not import": ('runner: ClassVar[str] = "toy_trainer:run"', 'runner: ClassVar[str] = "toy_trainer:nope"'),
}


def _in_process(tmp_path: Path, source: str) -> None:
    """The toy backend imported here (registered as ``toy`` on definition), from a module of its own."""
    import importlib
    import sys

    (tmp_path / "toy_trainer.py").write_text(source)
    sys.modules.pop("toy_trainer", None)
    importlib.invalidate_caches()
    sys.path.insert(0, str(tmp_path))
    try:
        importlib.import_module("toy_trainer")
    finally:
        sys.path.remove(str(tmp_path))


@pytest.mark.parametrize("kind", ["local", "verl"])
def test_forges_backends_pass_the_kit(kind: str) -> None:
    assert check_trainer(kind) == []


def test_a_packages_backend_passes_the_kit(tmp_path: Path) -> None:
    try:
        _in_process(tmp_path, PLUGIN)
        assert check_trainer("toy") == []
    finally:
        TRAINERS.remove("toy")


@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_the_kit_fails_a_backend_with_one_planted_defect(defect: str, tmp_path: Path) -> None:
    good, bad = DEFECTS[defect]
    assert good in PLUGIN
    try:
        _in_process(tmp_path, PLUGIN.replace(good, bad))
        problems = check_trainer("toy")
    finally:
        TRAINERS.remove("toy")
    assert any(defect in p for p in problems), problems
