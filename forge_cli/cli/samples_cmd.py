"""``forge samples export``: a run directory's rollouts as training samples (Parquet or a ``datasets`` directory)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from forge_cli.errors import UserError

app = typer.Typer(help="Training samples built from a run's recorded calls.", no_args_is_help=True)
TREATMENT_HELP = "mask (kept for the group's advantages, no loss), zero (reward 0) or drop"


def _run_config(run_dir: Path) -> dict[str, Any]:
    import yaml

    config = run_dir / "config.yaml"
    data = yaml.safe_load(config.read_text()) if config.is_file() else None
    return data if isinstance(data, dict) else {}


def _section(config: dict[str, Any], name: str) -> dict[str, Any]:
    value = config.get(name)
    return value if isinstance(value, dict) else {}


def _choice(option: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise UserError(f"{option} {value!r}: use one of {', '.join(allowed)}", exit_code=2)
    return value


@app.command("export")
def export(
    run_dir: Annotated[Path, typer.Argument(help="A `forge rollout` / `forge train` run directory.")],
    out: Annotated[Path, typer.Argument(help="Output: a .parquet file, or a directory with --format hf.")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="parquet, or hf (a datasets.load_from_disk directory).")
                   ] = "parquet",
    max_seq_len: Annotated[int | None, typer.Option(
        "--max-seq-len", help="Truncate/split segments to this many tokens (default: the run's trainer.max_seq_len, "
        "else none).", show_default=False)] = None,
    step: Annotated[int | None, typer.Option("--step", help="Only the rollouts of this step (batch).",
                                             show_default=False)] = None,
    timeout: Annotated[str, typer.Option("--timeout", help=f"Rollouts that timed out: {TREATMENT_HELP}.")] = "mask",
    over_length: Annotated[str, typer.Option("--over-length", help=f"Over-length rollouts: {TREATMENT_HELP}.")
                           ] = "mask",
    drop_group_on_infra: Annotated[bool, typer.Option(
        "--drop-group-on-infra", help="Drop a whole group when one of its rollouts had an infra error.")] = False,
    tokenizer: Annotated[Path | None, typer.Option(
        "--tokenizer", help="Model directory to decode the text columns with (default: the run's model).",
        show_default=False)] = None,
    no_text: Annotated[bool, typer.Option("--no-text", help="Leave the decoded text columns empty.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    sft: Annotated[bool, typer.Option("--sft", help="SFT samples instead: each call's request rendered with the "
                                      "student's chat template (--tokenizer DIR; default the run's model, else "
                                      "forge's default model) and the recorded answer as the assistant turn, loss on "
                                      "it only; for runs whose answers came from a teacher endpoint.")] = False,
    min_reward: Annotated[float, typer.Option("--min-reward", help="With --sft: keep only rollouts whose reward "
                                              "is at least this (rejection sampling).")] = 1.0,
) -> None:
    """Build the run's training samples (token ids, loss masks, rollout logprobs, rewards, advantages, rollout and
    segment ids, decoded text) and write them for SFT, rejection sampling or another trainer.

    Examples: forge samples export runs/RUN samples.parquet | forge samples export runs/RUN ds --format hf
    """
    from forge_cli.rollout.reader import read_run
    from forge_cli.serve.tokenizer import load_decoder, model_dir_of_run
    from forge_cli.train.algos import ADVANTAGES
    from forge_cli.train.samples import EPS, TREATMENTS, SamplePolicy, build_batch
    from forge_cli.train.samples_export import FORMATS, write_samples

    _choice("--format", fmt, FORMATS)
    _choice("--timeout", timeout, TREATMENTS)
    _choice("--over-length", over_length, TREATMENTS)
    if not run_dir.is_dir():
        raise UserError(f"{run_dir}: no such run directory", fix="give the directory `forge rollout` printed",
                        exit_code=2)
    if sft:
        _export_sft(run_dir, out, fmt, tokenizer, min_reward, as_json)
        return
    if max_seq_len is not None and max_seq_len < 2:
        raise UserError(f"--max-seq-len {max_seq_len}: must be at least 2", exit_code=2)
    config = _run_config(run_dir)
    algo, trainer = _section(config, "algo"), _section(config, "trainer")
    if max_seq_len is None and isinstance(trainer.get("max_seq_len"), int):
        max_seq_len = int(trainer["max_seq_len"])
    estimator = str(algo.get("advantage")) if str(algo.get("advantage")) in ADVANTAGES else "grpo"
    epsilon = algo.get("epsilon")
    policy = SamplePolicy(max_seq_len=max_seq_len, drop_group_on_infra=drop_group_on_infra,
                          timeout=timeout, over_length=over_length, advantage=estimator,  # type: ignore[arg-type]  # checked by _choice
                          norm_adv_by_std=bool(algo.get("norm_adv_by_std", True)),
                          epsilon=float(epsilon) if isinstance(epsilon, int | float) else EPS)

    decode = None
    note = ""
    if not no_text:
        if tokenizer is not None and not tokenizer.is_dir():
            raise UserError(f"--tokenizer {tokenizer}: no such directory", exit_code=2)
        model_dir = tokenizer or model_dir_of_run(run_dir)
        if model_dir is not None and model_dir.is_dir():
            decode = load_decoder(model_dir)
        else:
            note = "no tokenizer for this run's model: text columns left empty (pass --tokenizer DIR)"
    batch = build_batch(read_run(run_dir, step=step), policy)
    rows = write_samples(batch, out, fmt, decode)
    summary = {"out": str(out), "format": fmt, "max_seq_len": max_seq_len, "step": step, **batch.summary()}
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
    else:
        share = summary["merge_share"]
        typer.echo(f"wrote {rows} samples from {summary['kept']} of {summary['rollouts']} rollouts "
                   f"({summary['groups']} groups) to {out}")
        dropped = ", ".join(f"{k} {v}" for k, v in sorted(batch.dropped.items()))
        typer.echo(f"  calls {summary['calls']} ({summary['trainable']} trainable), merged "
                   f"{summary['merged']}/{summary['transitions']}"
                   + (f" ({100 * share:.0f}%)" if share is not None else "")
                   + f", loss tokens {summary['loss_tokens']}, truncated tokens {summary['truncated_tokens']}"
                   + (f", dropped: {dropped}" if dropped else ""))
    if note:
        typer.echo(f"note: {note}", err=True)


def _export_sft(run_dir: Path, out: Path, fmt: str, tokenizer: Path | None, min_reward: float, as_json: bool) -> None:
    from forge_cli.serve.prepare import default_model_dir
    from forge_cli.serve.tokenizer import model_dir_of_run
    from forge_cli.train.sft import export_sft

    if fmt != "parquet":
        raise UserError(f"--sft writes Parquet only, not --format {fmt}", fix="drop --format", exit_code=2)
    if tokenizer is not None and not tokenizer.is_dir():
        raise UserError(f"--tokenizer {tokenizer}: no such directory", exit_code=2)
    model_dir = tokenizer or model_dir_of_run(run_dir) or default_model_dir()
    summary = export_sft(run_dir, out, model_dir, min_reward)
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    typer.echo(f"wrote {summary['sequences']} SFT sequences ({summary['calls']} calls, {summary['loss_tokens']} loss "
               f"tokens of {summary['tokens']}) from {summary['kept']} of {summary['rollouts']} rollouts with reward "
               f">= {min_reward} to {out}, in the tokens of {model_dir}")
