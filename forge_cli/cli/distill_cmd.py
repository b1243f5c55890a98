"""``forge distill``: teacher trajectories through the harness, kept by reward, as SFT samples."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from forge_cli.cli.common import ConfigDir, JsonFlag, Overrides, load
from forge_cli.errors import UserError


def distill(
    overrides: Overrides = None,
    config_dir: ConfigDir = None,
    teacher: Annotated[str | None, typer.Option("--teacher", help="The teacher's OpenAI-compatible base URL, e.g. "
                                                "https://api.example.com/v1 or http://127.0.0.1:8000/v1.",
                                                show_default=False)] = None,
    teacher_model: Annotated[str, typer.Option("--teacher-model", help="Model name the teacher endpoint expects.")]
    = "teacher",
    key_env: Annotated[str | None, typer.Option("--key-env", help="Environment variable holding the teacher's API "
                                                "key (never recorded or logged).", show_default=False)] = None,
    token_ids: Annotated[bool, typer.Option("--token-ids", help="Ask the teacher for token ids and logprobs "
                                            "(a vLLM endpoint; an API refuses the fields).")] = False,
    trials: Annotated[int, typer.Option("--trials", help="Rollouts per task.")] = 1,
    min_reward: Annotated[float, typer.Option("--min-reward", help="Keep rollouts whose reward is at least this "
                                              "(rejection sampling).")] = 1.0,
    max_tokens: Annotated[int | None, typer.Option("--max-tokens", help="Spending cap: stop starting rollouts once "
                                                   "the teacher's prompt + completion tokens reach this.",
                                                   show_default=False)] = None,
    max_cost: Annotated[float | None, typer.Option("--max-cost", help="Spending cap in USD at --price: stop "
                                                   "starting rollouts once the teacher's tokens cost this.",
                                                   show_default=False)] = None,
    price: Annotated[str | None, typer.Option("--price", help="The teacher's list price as IN,OUT: USD per "
                                              "million prompt tokens, per million completion tokens (e.g. 3,15); "
                                              "the summary then gives the cost.", show_default=False)] = None,
    retries: Annotated[int, typer.Option("--retries", help="Runs again of a rollout the endpoint failed (429, "
                                         "5xx), with backoff.")] = 2,
    out: Annotated[Path | None, typer.Option("--out", help="SFT samples file (default: RUN_DIR/sft.parquet).",
                                             show_default=False)] = None,
    as_json: JsonFlag = False,
) -> None:
    """Run the env's train tasks through the harness with a TEACHER serving the model calls (through the capture
    proxy, sandboxes and verifiers as in training), keep rollouts whose reward reaches --min-reward, and write them
    as SFT samples in the student's tokens (the experiment's model=...) for forge sft. Evaluation splits (val, test)
    are refused.

    Examples: forge distill +harness=pi --teacher http://127.0.0.1:8500/v1 |
    forge distill +harness=codex --teacher https://api.example.com/v1 --teacher-model big --key-env TEACHER_KEY
    --trials 4 --max-cost 20 --price 3,15 runtime=docker
    """
    from forge_cli.cli.signals import stop_on_signals
    from forge_cli.train.distill import DistillOptions, run_distill, teacher_overrides
    from forge_cli.train.loop import model_directory

    if not teacher:
        raise UserError("forge distill needs --teacher URL (an OpenAI-compatible endpoint)",
                        fix="forge distill +harness=pi --teacher http://127.0.0.1:8500/v1 (benchmarks/"
                            "teacher_standin.py serves one for the builtin suite)", exit_code=2)
    for name, value in (("--trials", trials), ("--retries", retries + 1), ("--max-tokens", max_tokens or 1)):
        if value < 1:
            raise UserError(f"{name}: must be at least {1 if name != '--retries' else 0}", exit_code=2)
    if not teacher.startswith(("http://", "https://")):
        raise UserError(f"--teacher {teacher!r}: not an http(s) URL", fix="--teacher http://HOST:PORT/v1",
                        exit_code=2)
    options = DistillOptions(teacher, teacher_model, key_env, token_ids, trials, min_reward, max_tokens, retries,
                             str(out) if out else None, max_cost, parse_price(price, max_cost))
    student = load(["env.split=train", *(overrides or [])], config_dir).experiment
    student_dir = model_directory(student)  # the student's tokenizer and chat template render the samples
    composed = load(["env.split=train", *(overrides or []), *teacher_overrides(options)], config_dir)
    run_dir: list[str] = [f"{composed.experiment.run.output_dir}/<run>"]
    with stop_on_signals(lambda: f"finished rollouts are in {run_dir[0]}/results.jsonl; forge samples export --sft "
                                 f"{run_dir[0]} FILE writes the kept ones"):
        summary = run_distill(composed.experiment, composed.experiment.model_dump(mode="json"), student_dir, options,
                              on_run_dir=lambda path: run_dir.__setitem__(0, str(path)))
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    capped = (" (token cap reached)" if summary["token_cap_reached"] else
              " (cost cap reached)" if summary["cost_cap_reached"] else "")
    cost = f", ${summary['teacher_cost_usd']:.4f}" if summary["teacher_cost_usd"] is not None else ""
    typer.echo(f"distill {summary['run_id']}: kept {summary['kept']} of {summary['rollouts']} rollouts (reward >= "
               f"{min_reward:g}), teacher tokens {summary['teacher_tokens']}{cost}{capped}; SFT samples "
               f"{summary['sft']['out']} ({summary['sft']['sequences']} sequences, {summary['sft']['loss_tokens']} "
               f"loss tokens)")


def parse_price(price: str | None, max_cost: float | None) -> tuple[float, float] | None:
    """``--price IN,OUT`` as (USD per million prompt tokens, USD per million completion tokens)."""
    if max_cost is not None and (max_cost <= 0 or price is None):
        raise UserError("--max-cost: " + ("must be above 0" if max_cost <= 0 else "needs the teacher's --price"),
                        fix="--max-cost 20 --price 3,15 (USD per million prompt tokens, per million completion "
                            "tokens: the endpoint's list price), or --max-tokens N", exit_code=2)
    if price is None:
        return None
    try:
        prompt, completion = (float(part) for part in price.split(","))
    except ValueError:
        prompt = completion = -1.0
    if prompt < 0 or completion < 0:
        raise UserError(f"--price {price!r}: not IN,OUT (two prices, USD per million tokens, at least 0)",
                        fix="--price 3,15", exit_code=2)
    return prompt, completion
