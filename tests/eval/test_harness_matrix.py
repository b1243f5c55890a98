"""The cross-harness matrix (`benchmarks/harness_matrix.py`) and SFT -> RL chaining in `benchmarks/learning.py`:
which checkpoint a policy names, which tasks a cell evaluates (held-out templates only), the figures of a cell, and
`--init SFT_OUTPUT_DIR` starting each repeat from that benchmark's own choice and reusing its evaluation."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import benchmark_module

matrix = benchmark_module("harness_matrix")
learning = benchmark_module("learning")


def _learning_dir(root: Path, sft: bool, **extra: Any) -> Path:
    root.mkdir()
    (root / "learning-options.json").write_text(json.dumps({"sft": sft, **extra}))
    return root


def _summary(directory: Path, content: dict[str, Any]) -> None:
    directory.mkdir(parents=True)
    (directory / "summary.json").write_text(json.dumps(content))


def test_policies_name_a_checkpoint_or_what_a_learning_benchmark_chose(tmp_path: Path) -> None:
    assert matrix.policy_checkpoint("base") == ("base", None)
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    assert matrix.policy_checkpoint(f"mine={checkpoint}") == ("mine", str(checkpoint))
    sft = _learning_dir(tmp_path / "sft", sft=True)
    _summary(sft / "learning-r0-sft-20261206-040032-f676-sft", {"best": "/x/epoch-3"})
    _summary(sft / "learning-r1-sft-20261206-050032-f676-sft", {"best": "/x/other"})
    assert matrix.policy_checkpoint(f"sft={sft}") == ("sft", "/x/epoch-3")
    rl = _learning_dir(tmp_path / "rl", sft=False)
    _summary(rl / "learning-r0-train-20261206-071823-5212", {"checkpoints": ["/y/step-5", "/y/step-10"]})
    assert matrix.policy_checkpoint(f"rl={rl}") == ("rl", "/y/step-10")
    for bad, message in ((f"x={tmp_path / 'nope'}", "neither a checkpoint"), ("sft", "NAME=CHECKPOINT"),
                         (f"rl={_learning_dir(tmp_path / 'empty', sft=False)}", "no finished repeat 0")):
        with pytest.raises(SystemExit, match=message):
            matrix.policy_checkpoint(bad)


def test_cells_evaluate_only_the_templates_held_out_for_the_split() -> None:
    from forge_cli.envs.builtin.suite import BuiltinOptions, load

    ids = matrix.unseen_task_ids("test", 0, [])
    tasks = {t.id: t for t in load("test", BuiltinOptions(seed=0))}
    assert ids and set(ids) < set(tasks)
    assert all(tasks[i].metadata["held_out"] == "test" for i in ids)
    assert len(ids) == sum(1 for t in tasks.values() if t.metadata.get("held_out") == "test")
    assert not set(ids) & set(matrix.unseen_task_ids("val", 0, []))


def test_cell_figures_split_guided_and_count_infrastructure_errors(tmp_path: Path) -> None:
    rows = [{"task_id": f"{template}-{n}", "template": template, "seen": False, "guided": template.endswith("guided"),
             "pass_at": {"1": value}} for n, (template, value) in enumerate(
                 [("a-guided", 1.0), ("a-guided", 0.5), ("b", 0.0), ("c", 0.0), ("d-guided", 1.0)])]
    (tmp_path / "eval.json").write_text(json.dumps({"tasks": rows, "infra_errors": [{"task_id": "b-2"}]}))
    figures = matrix.cell_figures(tmp_path)
    assert figures["infra_errors"] == 1
    assert figures["unseen"]["tasks"] == 5 and figures["unseen"]["templates"] == 4
    assert figures["unseen"]["pass1"] == pytest.approx(2.5 / 5)
    assert figures["unseen/guided"]["pass1"] == pytest.approx(2.5 / 3)
    assert figures["unseen/not guided"] == {"tasks": 2, "templates": 2, "pass1": 0.0, "low": 0.0, "high": 0.0}
    assert figures["unseen"]["low"] <= 0.5 <= figures["unseen"]["high"]


def test_rl_from_an_sft_benchmark_starts_each_repeat_from_its_choice_and_reuses_its_evaluation(tmp_path: Path) -> None:
    same = {"split": "test", "trials": 3, "eval_temperature": 0.3, "seed": 0, "harness": "pi",
            "overrides": ["runtime=docker"]}
    sft = _learning_dir(tmp_path / "sft", sft=True, **same)
    _summary(sft / "learning-r0-sft-20261206-040032-f676-sft", {"best": "/x/epoch-3"})
    after = sft / "learning-r0-after-20261206-041222-8b37"
    after.mkdir()
    (after / "eval.json").write_text(json.dumps({"tasks": []}))
    args = argparse.Namespace(init=str(sft), **{k: v for k, v in same.items() if k != "overrides"})
    assert learning.init_checkpoint(args, 0) == "/x/epoch-3"
    with pytest.raises(SystemExit, match="no finished repeat 1"):
        learning.init_checkpoint(args, 1)
    out = tmp_path / "rl"
    out.mkdir()
    learning.reuse_sft_evaluation(learning.Runner(out, ["runtime=local"]), args, 0)  # other overrides: not reused
    assert not list(out.iterdir())
    runner = learning.Runner(out, ["runtime=docker"])
    learning.reuse_sft_evaluation(runner, args, 0)
    (link,) = runner._existing("r0-before")
    assert link.name == "learning-r0-before-20261206-041222-8b37" and link.resolve() == after.resolve()
    assert runner.run("r0-before", "eval", [], "eval.json").run_dir == link  # finished: reused, nothing runs
    checkpoint_args = argparse.Namespace(init="/some/checkpoint", **same)
    assert learning.init_checkpoint(checkpoint_args, 3) == "/some/checkpoint"
    with pytest.raises(SystemExit, match="without --sft"):
        learning.init_checkpoint(argparse.Namespace(init=str(_learning_dir(tmp_path / "rl0", sft=False))), 0)


def test_the_sft_control_trains_the_sft_checkpoint_further_on_its_data_for_rls_wall_time(tmp_path: Path) -> None:
    sft = _learning_dir(tmp_path / "sft", sft=True, sft_batch=4, sft_learning_rate=5e-5)
    distill = sft / "learning-r0-distill-20261206-040032-f676"
    distill.mkdir()
    (distill / "distill.json").write_text(json.dumps({"sft": {"out": str(distill / "sft.parquet")}}))
    calls: list[tuple[str, str, list[str]]] = []

    class Recorder:
        def run(self, name: str, command: str, args: list[str], done_file: str) -> str:
            calls.append((name, command, args))
            return name

    stages = benchmark_module("_sft_stages")
    draw = ["env.options.seed=0", "run.seed=0"]
    assert stages.sft_further(Recorder(), sft, 0, "/x/epoch-3", 31.25, draw) == "r0-control-train"
    [(name, command, args)] = calls
    assert (name, command) == ("r0-control-train", "sft")
    assert args[args.index("--data") + 1] == str(distill / "sft-train.parquet")
    assert args[args.index("--max-minutes") + 1] == "31.25" and args[args.index("--batch") + 1] == "4"
    assert {"model.path=/x/epoch-3", "trainer.learning_rate=5e-05", "run.seed=0"} <= set(args)
    assert "env.options.seed=0" not in args and "--val" not in args  # the last checkpoint, not one chosen by NLL
    with pytest.raises(SystemExit, match="no finished distill stage of repeat 1"):
        stages.sft_further(Recorder(), sft, 1, "/x/epoch-3", 1.0, draw)
    for init in ("/some/checkpoint", str(_learning_dir(tmp_path / "rl", sft=False))):
        with pytest.raises(SystemExit) as exit_info:
            learning.parse(["--control", "sft", "--init", init, "--harness", "pi"])
        assert exit_info.value.code == 2
    with pytest.raises(SystemExit) as exit_info:  # no --init at all
        learning.parse(["--control", "sft"])
    assert exit_info.value.code == 2
