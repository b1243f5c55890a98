"""The SFT stages of ``benchmarks/learning.py --sft``: teacher trajectories through the harness (``forge distill``
against ``benchmarks/teacher_standin.py``), a split of them for SFT validation, and ``forge sft``.

The stand-in knows the builtin suite's train tasks of the repeat's own draw; it refuses every val and test task,
and :func:`check_disjoint` asserts that the SFT data shares no task, instruction or unseen template with ``val`` or
``test`` before any training. SFT validation (choosing the epoch by NLL) uses teacher trajectories of train tasks
held out from SFT training, one instance per seen template (the teacher answers no val task, by design); the
recipe itself (learning rate, batch, epochs) was chosen on the ``val`` split's pass rate through the harness.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent


def standin() -> ModuleType:
    spec = importlib.util.spec_from_file_location("teacher_standin", HERE / "teacher_standin.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("teacher_standin", module)
    spec.loader.exec_module(module)
    return module


def _tasks(overrides: list[str], split: str) -> list[Any]:
    from forge_cli.config.compose import compose
    from forge_cli.envs.source import load_tasks

    return load_tasks(compose([*overrides, f"env.split={split}"]).experiment.env).tasks


def check_disjoint(sft_file: Path, draw: list[str]) -> dict[str, Any]:
    """The SFT data against ``val`` and ``test`` of the same draw: no task id, no instruction and no template that
    is unseen there; SystemExit when any is shared. Returns the counts."""
    import pyarrow.parquet as pq

    used = set(pq.read_table(sft_file, columns=["task_id"]).column("task_id").to_pylist())
    train = {t.id: t for t in _tasks(draw, "train")}
    unknown = used - set(train)
    held: dict[str, Any] = {}
    for split in ("val", "test"):
        for task in _tasks(draw, split):
            held[task.id] = task
    shared_ids = used & set(held)
    instructions = {" ".join(train[i].instruction.split()) for i in used if i in train}
    shared_text = [t.id for t in held.values() if " ".join(t.instruction.split()) in instructions]
    unseen = {t.metadata.get("template") for t in held.values() if t.metadata.get("held_out")}
    shared_templates = {train[i].metadata.get("template") for i in used if i in train} & unseen
    if unknown or shared_ids or shared_text or shared_templates:
        raise SystemExit(f"[learning] the SFT data overlaps the evaluation splits: ids {sorted(shared_ids)}, "
                         f"instructions {shared_text}, unseen templates {sorted(shared_templates)}, not train "
                         f"{sorted(unknown)}")
    return {"sft_tasks": len(used), "templates": len({train[i].metadata.get("template") for i in used}),
            "val_test_tasks": len(held), "unseen_templates_held_out": len(unseen), "shared": 0}


def split_validation(sft_file: Path, out_dir: Path) -> tuple[Path, Path, dict[str, int]]:
    """Train and validation files: each template's last train instance (highest seed) held out for validation."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(sft_file)
    rows = table.to_pylist()
    last: dict[str, int] = {}
    for row in rows:
        template, _, seed = row["task_id"].rpartition("-")
        last[template] = max(last.get(template, -1), int(seed))
    val = [r for r in rows if int(r["task_id"].rpartition("-")[2]) == last[r["task_id"].rpartition("-")[0]]]
    train = [r for r in rows if r not in val]
    train_file, val_file = out_dir / "sft-train.parquet", out_dir / "sft-val.parquet"
    pq.write_table(pa.Table.from_pylist(train, schema=table.schema), train_file)
    pq.write_table(pa.Table.from_pylist(val, schema=table.schema), val_file)
    return train_file, val_file, {"train_sequences": len(train), "val_sequences": len(val)}


def distill_and_sft(runner: Any, args: Any, r: int, draw: list[str], harness: list[str]) -> dict[str, Any]:
    """Stages ``r<R>-distill`` and ``r<R>-sft`` (each reused when finished); returns them and the SFT checkpoint."""
    module = standin()
    options = [f"env.options.train_per_template={args.sft_train_per_template}"]
    teacher = module.builtin_teacher([*draw, *options])
    with module.TeacherServer(teacher) as server:
        distill = runner.run(f"r{r}-distill", "distill", [
            "--teacher", server.base_url, "--teacher-model", "teacher-standin", "--trials", "1",
            "--min-reward", "1", *harness, *draw, *options], "distill.json", resumable=False)
    refused = {k.task_id for k in teacher.known if k.solution is None}
    if refused & set(teacher.served):
        raise SystemExit("[learning] the teacher stand-in answered a val or test task")
    sft_file = Path(distill.summary["sft"]["out"])
    disjoint = check_disjoint(sft_file, [*draw, *options])
    train_file, val_file, counts = split_validation(sft_file, sft_file.parent)
    sft = runner.run(f"r{r}-sft", "sft", [
        "--data", str(train_file), "--val", str(val_file), "--epochs", str(args.sft_epochs), "--batch",
        str(args.sft_batch), "--patience", "1", f"trainer.learning_rate={args.sft_learning_rate}",
        "trainer.gradient_checkpointing=false", *draw[1:]], "summary.json")
    best = sft.summary.get("best")
    if not best:
        raise SystemExit(f"[learning] the SFT run {sft.run_dir} chose no checkpoint")
    say_counts = {**disjoint, **counts, "kept": distill.summary["kept"], "rollouts": distill.summary["rollouts"]}
    (Path(str(sft.run_dir)) / "sft-data.json").write_text(json.dumps(say_counts, indent=2) + "\n")
    return {"distill": distill, "sft": sft, "checkpoint": best, "data": say_counts}


def sft_further(runner: Any, init: Path, r: int, start: str, minutes: float, draw: list[str]) -> Any:
    """Stage ``r<R>-control-train`` of SFT -> RL (issue 32 item 6's control): the SFT checkpoint ``start`` trained
    further with SFT, on the SFT benchmark ``init``'s own training data of repeat ``r`` and with its recipe, for
    ``minutes`` (the RL run's wall time); its last checkpoint is the control's policy."""
    options = json.loads((init / "learning-options.json").read_text())
    distilled = sorted(init.glob(f"learning-r{r}-distill-2*/distill.json"))
    if not distilled:
        raise SystemExit(f"[learning] the SFT benchmark in {init} has no finished distill stage of repeat {r}")
    data = Path(json.loads(distilled[-1].read_text())["sft"]["out"]).parent / "sft-train.parquet"
    return runner.run(f"r{r}-control-train", "sft", [
        "--data", str(data), "--epochs", "1000", "--batch", str(options["sft_batch"]), "--max-minutes",
        f"{minutes:.2f}", f"trainer.learning_rate={options['sft_learning_rate']}",
        "trainer.gradient_checkpointing=false", f"model.path={start}", *draw[1:]], "summary.json")
