"""``forge sft``: supervised fine-tuning of the policy on SFT samples (``forge samples export --sft``: teacher
trajectories rendered in the student's tokens), on forge's local trainer.

Per epoch the sequences are shuffled (``run.seed`` and the epoch), taken ``batch`` at a time, and each batch is one
AdamW step of token-mean NLL on its loss spans (``forge_cli/train/sft.py``: ``nll``). A sequence longer than
``trainer.max_seq_len`` is left out (cutting it could cut loss tokens) and counted (``sequences_too_long``). After
each epoch the weights go to ``checkpoints/epoch-N`` (servable: ``forge eval model=vllm model.path=CKPT``, or a LoRA
adapter with ``trainer.lora``; with the optimizer state, so ``--resume`` goes on from there) and, with a validation
file, its NLL is measured; training stops once it has not improved for ``patience`` epochs, and ``summary.json``
names the best checkpoint. ``max_minutes`` bounds the training time instead (e.g. a control trained for the same
wall time as an RL run): once it is spent the epoch in progress ends after its current step (``partial`` in its
record), is checkpointed like any other, and training stops. ``metrics.jsonl`` and ``tensorboard/`` have a record
per step and per epoch.

The run directory holds ``config.yaml`` (the experiment) and ``sft.json`` (data, validation, epochs, batch,
patience), so ``forge sft --resume RUN_DIR`` continues the same run."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from forge_cli.config.schema import Experiment
from forge_cli.errors import UserError
from forge_cli.train.metrics_log import MetricsLog, logger_classes
from forge_cli.train.sft import SftSequence

OPTIONS_FILE = "sft.json"
EPOCH_METRICS = "metrics.json"
COLUMNS = ("rollout_id", "task_id", "reward", "input_ids", "loss_mask", "calls")


@dataclass(frozen=True)
class SftOptions:
    data: str
    val: str | None = None
    epochs: int = 3
    batch: int = 8
    patience: int = 1
    max_minutes: float | None = None


def read_sequences(path: Path) -> list[SftSequence]:
    """The sequences of an SFT Parquet file; UserError (exit 2) for a missing file or one of another kind."""
    import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]

    if not path.is_file():
        raise UserError(f"{path}: no such file", fix="write one with forge samples export --sft RUN_DIR FILE",
                        exit_code=2)
    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several kinds for a file that is not Parquet
        raise UserError(f"{path}: not a Parquet file ({exc})", exit_code=2) from None
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise UserError(f"{path}: not SFT samples (no column {', '.join(missing)})",
                        fix="write it with forge samples export --sft", exit_code=2)
    return [SftSequence(r["rollout_id"], r["task_id"], r["reward"], list(r["input_ids"]), list(r["loss_mask"]),
                        int(r["calls"])) for r in table.select(list(COLUMNS)).to_pylist()]


def _epoch_of(path: Path) -> int:
    return int(path.name.split("-", 1)[1])


def done_epochs(run_dir: Path) -> list[Path]:
    """The epoch checkpoints whose epoch finished (its metrics written), oldest first."""
    root = run_dir / "checkpoints"
    found = [p for p in root.glob("epoch-*") if p.is_dir() and (p / EPOCH_METRICS).is_file()] if root.is_dir() else []
    return sorted(found, key=_epoch_of)


def run_sft(exp: Experiment, options: SftOptions, run_dir: Path, say: Callable[[str], None],
            resume: bool = False) -> dict[str, Any]:
    """Train, checkpoint per epoch, stop when validation NLL stops improving; returns the summary."""
    from forge_cli.train.local import LocalTrainer
    from forge_cli.train.loop import model_directory
    from forge_cli.train.sft import as_samples, nll

    logger_classes(exp.trainer.loggers)  # a logger whose client is missing stops the run before the model loads
    train = read_sequences(Path(options.data))
    val = read_sequences(Path(options.val)) if options.val else []
    limit = exp.trainer.max_seq_len
    too_long = sum(len(s.input_ids) > limit for s in train)
    train = [s for s in train if len(s.input_ids) <= limit and s.loss_tokens > 0]
    val = [s for s in val if len(s.input_ids) <= limit and s.loss_tokens > 0]
    if not train:
        raise UserError(f"{options.data}: no sequence with loss tokens within trainer.max_seq_len={limit}",
                        exit_code=2)
    samples, val_samples = as_samples(train), as_samples(val)
    trainer = LocalTrainer(model_directory(exp), exp.trainer, exp.algo, device=getattr(exp.model, "device", "cpu"),
                           seed=exp.run.seed)
    finished = done_epochs(run_dir) if resume else []
    history = [json.loads((p / EPOCH_METRICS).read_text()) for p in finished]
    if finished:
        trainer.load(finished[-1])
        say(f"resuming after epoch {_epoch_of(finished[-1])} ({finished[-1]})")
    log = MetricsLog(run_dir, loggers=exp.trainer.loggers, run_name=run_dir.name, config=exp.model_dump(mode="json"))
    steps_per_epoch = -(-len(samples) // options.batch)
    say(f"sft: {len(samples)} sequences ({sum(s.loss_tokens for s in samples)} loss tokens; {too_long} longer than "
        f"trainer.max_seq_len left out), {len(val_samples)} for validation, {options.epochs} epoch(s) x "
        f"{steps_per_epoch} steps of {options.batch}")
    start_file = run_dir / "val_start.json"
    if val_samples and not start_file.is_file():  # the starting policy's validation NLL, once per run
        start_file.write_text(json.dumps({"val_nll": nll(trainer, val_samples, train=False)["nll"]}))
    val_start = json.loads(start_file.read_text())["val_nll"] if start_file.is_file() else None
    if val_start is not None:
        say(f"validation nll before training: {val_start:.4f}")
    stopped = False
    began = time.monotonic()
    budget = None if options.max_minutes is None else options.max_minutes * 60
    spent_before = sum(h["epoch_s"] for h in history)  # a resumed run's finished epochs count against the budget
    out_of_time = any("partial" in h for h in history) or (budget is not None and spent_before >= budget)
    try:
        for epoch in range(len(finished), options.epochs):
            if _stale(history, options.patience) or out_of_time:
                stopped = True
                break
            order = list(range(len(samples)))
            random.Random(f"{exp.run.seed}:{epoch}").shuffle(order)
            started, losses = time.monotonic(), []
            for n in range(steps_per_epoch):
                batch = [samples[i] for i in order[n * options.batch:(n + 1) * options.batch]]
                m = nll(trainer, batch, train=True)
                losses.append(m["nll"])
                log.write(trainer.steps, {"train_nll": m["nll"], "grad_norm": m["grad_norm"],
                                          "loss_tokens": m["loss_tokens"], "epoch": epoch + 1})
                say(f"epoch {epoch + 1}/{options.epochs} step {n + 1}/{steps_per_epoch}: nll {m['nll']:.4f}")
                if budget is not None and spent_before + time.monotonic() - began >= budget:
                    out_of_time = True
                    break
            record: dict[str, Any] = {"epoch": epoch + 1, "train_nll": sum(losses) / len(losses),
                                      "epoch_s": time.monotonic() - started, "steps": trainer.steps,
                                      "sequences_too_long": too_long}
            if out_of_time and len(losses) < steps_per_epoch:
                record["partial"] = len(losses)
            if val_samples:
                record["val_nll"] = nll(trainer, val_samples, train=False)["nll"]
            checkpoint = run_dir / "checkpoints" / f"epoch-{epoch + 1}"
            trainer.save(checkpoint)
            (checkpoint / EPOCH_METRICS).write_text(json.dumps(record))  # last: the epoch is done
            history.append(record)
            log.write(trainer.steps, {k: v for k, v in record.items() if k != "steps"})
            val_text = f", val nll {record['val_nll']:.4f}" if "val_nll" in record else ""
            say(f"epoch {epoch + 1}: train nll {record['train_nll']:.4f}{val_text} -> {checkpoint}")
        stopped = stopped or out_of_time or (len(history) < options.epochs)
    finally:
        log.close()
    best = _best(history)
    summary = {"run_dir": str(run_dir), "val_nll_start": val_start, "epochs": history, "stopped_early": stopped,
               "stopped_by_time": out_of_time,
               "best": str(run_dir / "checkpoints" / f"epoch-{best}") if best else None,
               "chosen_by": "val_nll" if val_samples else "last epoch", "options": asdict(options),
               "duration_s": round(time.monotonic() - began, 1)}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def _stale(history: list[dict[str, Any]], patience: int) -> bool:
    """Has validation NLL not improved over the last ``patience`` epochs?"""
    scores = [h["val_nll"] for h in history if "val_nll" in h]
    if len(scores) <= patience:
        return False
    return min(scores[-patience:]) >= min(scores[:-patience])


def _best(history: list[dict[str, Any]]) -> int | None:
    if not history:
        return None
    if all("val_nll" in h for h in history):
        return int(min(history, key=lambda h: h["val_nll"])["epoch"])
    return int(history[-1]["epoch"])
