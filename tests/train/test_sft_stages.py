"""The SFT stages of `benchmarks/learning.py --sft` (`benchmarks/_sft_stages.py`): SFT data that touches `val` or
`test` (a task id, an instruction, an unseen template) stops the benchmark before any training; each template's
last train instance is held out for SFT validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import benchmark_module
from tests.requires import module

pa = module("pyarrow", "core")
pq = module("pyarrow.parquet", "core")


stages = benchmark_module("_sft_stages")
DRAW = ["env.options.seed=0", "env.options.train_per_template=4"]


def _write(path: Path, task_ids: list[str]) -> Path:
    rows = [{"rollout_id": f"r{n}", "task_id": t, "reward": 1.0, "input_ids": [1, 2, 3], "loss_mask": [0, 1, 1],
             "calls": 1, "loss_tokens": 2} for n, t in enumerate(task_ids)]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_train_only_data_passes_and_anything_held_out_stops_the_benchmark(tmp_path: Path) -> None:
    train = ["create-edit-write-file-0", "create-edit-write-file-9", "answer-lookup-3"]
    counts = stages.check_disjoint(_write(tmp_path / "ok.parquet", train), DRAW)
    assert counts["sft_tasks"] == 3 and counts["templates"] == 2 and counts["shared"] == 0
    tasks = {split: stages._tasks(DRAW, split) for split in ("val", "test")}
    held_out = next(t for t in tasks["test"] if t.metadata.get("held_out"))
    seen_val = next(t for t in tasks["val"] if not t.metadata.get("held_out"))
    for bad in (held_out.id, seen_val.id, "no-such-task-0"):
        with pytest.raises(SystemExit, match="overlaps the evaluation splits"):
            stages.check_disjoint(_write(tmp_path / "bad.parquet", [*train, bad]), DRAW)


def test_each_templates_last_instance_validates(tmp_path: Path) -> None:
    ids = ["create-edit-write-file-0", "create-edit-write-file-3", "create-edit-write-file-9", "answer-lookup-0",
           "answer-lookup-6", "search-count-count-guided-3"]
    train, val, counts = stages.split_validation(_write(tmp_path / "all.parquet", ids), tmp_path)
    held = set(pq.read_table(val).column("task_id").to_pylist())
    assert held == {"create-edit-write-file-9", "answer-lookup-6", "search-count-count-guided-3"}
    assert set(pq.read_table(train).column("task_id").to_pylist()) == set(ids) - held
    assert counts == {"train_sequences": 3, "val_sequences": 3}


def test_sft_benchmark_trains_before_it_evaluates(monkeypatch: pytest.MonkeyPatch) -> None:
    """`learning.py --sft` runs distill and SFT first, so their checkpoint exists before the evaluations (other
    benchmarks use it while those run); every stage still runs, once each."""
    import argparse
    import sys
    import types

    learning = benchmark_module("learning")
    order: list[str] = []

    class Runner:
        def run(self, name: str, command: str, args: list[str], done_file: str, resumable: bool = True) -> object:
            order.append(name)
            return learning.Stage(name)

    def distill_and_sft(runner: Runner, args: object, r: int, draw: list[str], harness: list[str]) -> dict:
        distill, sft = runner.run(f"r{r}-distill", "distill", [], ""), runner.run(f"r{r}-sft", "sft", [], "")
        return {"distill": distill, "sft": sft, "checkpoint": "/ckpt", "data": {}}

    # learning.py imports `_sft_stages` by name when it runs: whichever module sys.modules holds then gets the fake
    monkeypatch.setitem(sys.modules, "_sft_stages", types.SimpleNamespace(distill_and_sft=distill_and_sft))
    args = argparse.Namespace(control="eval", seed=0, harness="pi")
    made = learning.sft_repeat(Runner(), args, 0, ["eval", "env.split=test"])
    assert order == ["r0-distill", "r0-sft", "r0-before", "r0-after", "r0-control"]
    assert set(made) == {"before", "distill", "train", "after", "control"}
