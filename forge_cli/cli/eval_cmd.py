"""``forge eval``: run the env's held-out tasks K times each and report mean score, pass@k and pass^k."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from forge_cli.cli.common import ConfigDir, JsonFlag, Overrides, experiment
from forge_cli.errors import UserError


def eval_(
    overrides: Overrides = None,
    config_dir: ConfigDir = None,
    resume: Annotated[Path | None, typer.Option(
        "--resume", help="Continue an interrupted eval in RUN_DIR (its saved experiment; finished trials are kept).",
        show_default=False)] = None,
    compare: Annotated[tuple[Path, Path] | None, typer.Option(
        "--compare", help="Print the per-task and overall difference of two eval runs (B minus A) and exit.",
        show_default=False)] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the plan; start nothing.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Evaluate a policy through the harness on the env's test split: every task `eval.trials` times.

    Reports mean score, pass@k (unbiased estimator over n >= k trials) and pass^k (all k trials pass, as
    Claw-Eval counts it), overall and per category with 95% confidence intervals: a table here, eval.json and a
    self-contained report.html in the run directory. Trials that fail for infrastructure reasons are retried
    (eval.retries) and never counted as agent failures.

    Examples: forge eval eval.trials=3 | forge eval model=vllm model.path=CKPT | forge eval --resume runs/RUN
    """
    from rich.console import Console

    console = Console(highlight=False, soft_wrap=True)
    if compare is not None:
        if overrides or resume or dry_run:
            raise UserError("--compare takes two run directories and nothing else", exit_code=2)
        from forge_cli.eval.compare import compare as compare_runs
        from forge_cli.eval.compare import render_comparison

        render_comparison(compare_runs(*compare), console)
        from forge_cli.rollout import manifest

        changed = manifest.differences(*(manifest.read(Path(p)) for p in compare))
        if changed:
            Console(stderr=True, highlight=False, soft_wrap=True).print(
                "warning: the two runs differ in what ran, not only in their results:\n  " + "\n  ".join(changed),
                markup=False)
        return
    exp, data = experiment("eval", overrides, config_dir, resume, defaults=_eval_defaults(overrides))
    if dry_run:
        from forge_cli.rollout.plan import build_plan
        from forge_cli.rollout.plan_view import show

        plan = build_plan(exp, purpose="eval")
        if as_json:
            typer.echo(json.dumps(plan.to_dict(), indent=2))
        else:
            show(plan)
            typer.echo(f"eval: {plan.num_tasks} tasks x {exp.eval.trials} trials = "
                       f"{plan.num_tasks * exp.eval.trials} rollouts")
        return
    from forge_cli.cli.signals import stop_on_signals
    from forge_cli.eval.report import render_table
    from forge_cli.eval.run import run_eval

    run_dir: list[str] = [f"{exp.run.output_dir}/<run>"]
    with stop_on_signals(lambda: f"finished trials are in {run_dir[0]}/results.jsonl; continue with: "
                                 f"forge eval --resume {run_dir[0]}"):
        # progress goes to stderr either way; --json changes stdout only
        report = run_eval(exp, data, resume=resume, on_run_dir=lambda path: run_dir.__setitem__(0, str(path)))
    if as_json:
        typer.echo(json.dumps(report.to_dict(), indent=2))
        return
    render_table(report, console)
    for line in (report.meta.get("benchmark") or {}).get("lines", []):
        console.print(line, markup=False, highlight=False)
    console.print(f"reports: {report.json_path}  {report.html_path}")


def _eval_defaults(overrides: list[str] | None) -> list[str]:
    """An eval runs each task ``eval.trials`` times: unless the user sets them, one sample per task per trial and
    the run named after the command."""
    given = {o.split("=", 1)[0].lstrip("+") for o in overrides or []}
    defaults = []
    if "rollout.samples_per_task" not in given:
        defaults.append("rollout.samples_per_task=1")
    if "run.name" not in given:
        defaults.append("run.name=forge-eval")
    return defaults
