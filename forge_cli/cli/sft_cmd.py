"""``forge sft``: supervised fine-tuning on SFT samples (teacher trajectories in the student's tokens)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from forge_cli.cli.common import ConfigDir, JsonFlag, Overrides, experiment
from forge_cli.errors import UserError


def sft(
    data: Annotated[Path | None, typer.Option("--data", help="SFT samples: a Parquet file written by `forge samples "
                                              "export --sft` (not needed with --resume).", show_default=False)] = None,
    overrides: Overrides = None,
    config_dir: ConfigDir = None,
    val: Annotated[Path | None, typer.Option("--val", help="SFT samples for validation: NLL after each epoch; the "
                                             "best epoch is chosen by it and training stops when it stops improving.",
                                             show_default=False)] = None,
    epochs: Annotated[int, typer.Option("--epochs", help="Passes over the data (at most).")] = 3,
    batch: Annotated[int, typer.Option("--batch", help="Sequences per AdamW step.")] = 8,
    patience: Annotated[int, typer.Option("--patience", help="Stop after this many epochs without a better "
                                          "validation NLL.")] = 1,
    max_minutes: Annotated[float | None, typer.Option("--max-minutes", help="Stop once this much training time is "
                                                      "spent (the epoch in progress ends and is checkpointed).",
                                                      show_default=False)] = None,
    resume: Annotated[Path | None, typer.Option("--resume", help="Continue RUN_DIR after its last finished epoch.",
                                                show_default=False)] = None,
    as_json: JsonFlag = False,
) -> None:
    """Fine-tune the policy (model=..., trainer.* : learning rate, LoRA, precision, max_seq_len) on teacher
    trajectories: token-mean NLL on the assistant spans, a servable checkpoint per epoch (checkpoints/epoch-N), the
    best one chosen on --val. Writes config.yaml, sft.json, metrics.jsonl, tensorboard/ and summary.json.

    Examples: forge samples export --sft runs/TEACHER sft.parquet && forge sft --data sft.parquet --epochs 2 |
    forge sft --data train.parquet --val val.parquet trainer.lora.rank=16 | forge sft --resume runs/RUN
    """
    import yaml

    from forge_cli.rollout.session import new_run_id
    from forge_cli.train.sft_run import OPTIONS_FILE, SftOptions, run_sft

    exp, saved = experiment("sft", overrides, config_dir, resume)
    if resume is not None:
        if data is not None or val is not None:
            raise UserError("--resume continues the saved run: give no --data or --val with it", exit_code=2)
        options_file = resume / OPTIONS_FILE
        if not options_file.is_file():
            raise UserError(f"--resume: {resume} has no {OPTIONS_FILE} (not a forge sft run)", exit_code=2)
        options = SftOptions(**json.loads(options_file.read_text()))
        run_dir = resume
    else:
        if data is None:
            raise UserError("forge sft needs --data FILE (SFT samples)",
                            fix="forge samples export --sft RUN_DIR sft.parquet, then forge sft --data sft.parquet",
                            exit_code=2)
        for name, value in (("--epochs", epochs), ("--batch", batch), ("--patience", patience)):
            if value < 1:
                raise UserError(f"{name} {value}: must be at least 1", exit_code=2)
        if max_minutes is not None and not max_minutes > 0:
            raise UserError(f"--max-minutes {max_minutes}: must be more than 0", exit_code=2)
        for path in (data, val):
            if path is not None and not path.is_file():
                raise UserError(f"{path}: no such file", fix="write it with forge samples export --sft",
                                exit_code=2)
        options = SftOptions(str(data.resolve()), str(val.resolve()) if val else None, epochs, batch, patience,
                             max_minutes)
        run_dir = Path(exp.run.output_dir).expanduser().resolve() / f"{new_run_id(exp)}-sft"
        run_dir.mkdir(parents=True)
        (run_dir / "config.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
        (run_dir / OPTIONS_FILE).write_text(json.dumps(asdict(options), indent=2))
    say = (lambda m: None) if as_json else (lambda m: typer.echo(m, err=True))
    say(f"run directory: {run_dir}")
    summary = run_sft(exp, options, run_dir, say, resume=resume is not None)
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
    else:
        stopped = (" (stopped: --max-minutes spent)" if summary["stopped_by_time"] else
                   " (stopped: validation stopped improving)" if summary["stopped_early"] else "")
        typer.echo(f"sft: {len(summary['epochs'])} epoch(s){stopped}; best checkpoint {summary['best']} "
                   f"(by {summary['chosen_by']})")
