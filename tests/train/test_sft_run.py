"""`forge sft` on a real harness's teacher trajectories (pi through the proxy, answered by the teacher stand-in):
two AdamW steps of NLL on two tasks' trajectories lower the NLL of a third task's trajectory held out for
validation; a servable checkpoint per epoch with its metrics; --resume redoes an epoch that did not finish;
--max-minutes ends training after the step that spends it; bad input is one message, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import forge
from tests.train.test_sft_samples import teacher_run  # noqa: F401  (the fixture)

# two whole forge sft runs through pi (~3.7 min on 2 cores): make test-e2e, keeping make test under 40 min
pytestmark = [pytest.mark.e2e, pytest.mark.mitm, pytest.mark.requires("harness:pi", "core", "model")]
HELD_OUT = "json-csv-json-field-0"


def _split(teacher_run: Path, tmp_path: Path) -> tuple[Path, Path]:  # noqa: F811
    import pyarrow as pa
    import pyarrow.parquet as pq

    every = tmp_path / "all.parquet"
    done = forge("samples", "export", "--sft", str(teacher_run), str(every))
    assert done.returncode == 0, done.stderr
    table = pq.read_table(every)
    rows = table.to_pylist()
    train, val = tmp_path / "train.parquet", tmp_path / "val.parquet"
    pq.write_table(pa.Table.from_pylist([r for r in rows if r["task_id"] != HELD_OUT], schema=table.schema), train)
    pq.write_table(pa.Table.from_pylist([r for r in rows if r["task_id"] == HELD_OUT], schema=table.schema), val)
    return train, val


def test_two_sft_steps_lower_the_held_out_nll_and_resume_redoes_an_unfinished_epoch(
        teacher_run: Path, tmp_path: Path) -> None:  # noqa: F811
    train, val = _split(teacher_run, tmp_path)
    runs = tmp_path / "runs"
    done = forge("sft", "--json", "--data", str(train), "--val", str(val), "--epochs", "2", "--batch", "2",
                 "trainer.precision=float32", f"run.output_dir={runs}", timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    first, second = summary["epochs"]
    assert summary["val_nll_start"] > first["val_nll"] > second["val_nll"], summary
    assert second["steps"] == 2 and summary["chosen_by"] == "val_nll" and summary["best"].endswith("epoch-2")
    run_dir = Path(summary["run_dir"])
    for epoch in ("epoch-1", "epoch-2"):
        checkpoint = run_dir / "checkpoints" / epoch
        assert (checkpoint / "model.safetensors").is_file() and (checkpoint / "chat_template.jinja").is_file()
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines if "train_nll" in line and "epoch_s" not in line] == [1, 2]
    assert list((run_dir / "tensorboard").iterdir())
    # a crash during epoch 2: its metrics never written; --resume starts again from epoch 1's checkpoint
    (run_dir / "checkpoints" / "epoch-2" / "metrics.json").unlink()
    again = forge("sft", "--json", "--resume", str(run_dir), timeout=1200)
    assert again.returncode == 0, again.stderr[-3000:]
    resumed = json.loads(again.stdout)
    assert [e["epoch"] for e in resumed["epochs"]] == [1, 2] and resumed["epochs"][1]["steps"] == 2
    assert resumed["val_nll_start"] == summary["val_nll_start"]


def test_max_minutes_ends_the_epoch_in_progress_checkpoints_it_and_stops(
        teacher_run: Path, tmp_path: Path) -> None:  # noqa: F811
    train, _ = _split(teacher_run, tmp_path)
    done = forge("sft", "--json", "--data", str(train), "--epochs", "5", "--batch", "1", "--max-minutes", "0.0001",
                 "trainer.precision=float32", f"run.output_dir={tmp_path / 'runs'}", timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    [epoch] = summary["epochs"]  # the budget is spent after the first step: no second epoch
    assert epoch["steps"] == 1 and epoch["partial"] == 1 and summary["stopped_by_time"], summary
    assert summary["best"].endswith("epoch-1") and summary["chosen_by"] == "last epoch"
    assert (Path(summary["best"]) / "model.safetensors").is_file()
    again = forge("sft", "--json", "--resume", summary["run_dir"], timeout=1200)  # nothing left to spend
    assert again.returncode == 0 and len(json.loads(again.stdout)["epochs"]) == 1, again.stderr[-3000:]


def test_bad_input_is_one_message_exit_2(tmp_path: Path) -> None:
    not_parquet = tmp_path / "x.parquet"
    not_parquet.write_text("hello")
    for args, needle in ((["sft"], "needs --data"), (["sft", "--data", str(tmp_path / "none.parquet")], "no such file"),
                         (["sft", "--data", str(not_parquet), f"run.output_dir={tmp_path}"], "not a Parquet file"),
                         (["sft", "--data", str(not_parquet), "--epochs", "0"], "--epochs 0"),
                         (["sft", "--data", str(not_parquet), "--max-minutes", "0"], "--max-minutes 0"),
                         (["sft", "--resume", str(tmp_path)], "not a forge run directory")):
        done = forge(*args)
        assert done.returncode == 2 and needle in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
