"""``forge train``: the RL loop on one machine (rollouts through the harness, verifier rewards, policy updates)."""

from __future__ import annotations

import importlib
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from forge_cli.cli.common import ConfigDir, JsonFlag, Overrides, experiment
from forge_cli.errors import UserError

if TYPE_CHECKING:
    from forge_cli.config.schema import Experiment


def train(
    overrides: Overrides = None,
    config_dir: ConfigDir = None,
    resume: Annotated[Path | None, typer.Option(
        "--resume", help="Continue RUN_DIR after its last checkpoint (its saved experiment, the same task order).",
        show_default=False)] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the plan; start nothing.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Train the policy with RL through the harness: per step, trainer.tasks_per_step tasks of the env's train split
    x algo.group_size rollouts, verifier rewards, samples from the recorded tokens, one update, new weights served.

    Writes metrics.jsonl, tensorboard/ and checkpoints/ (servable: forge serve/eval model=vllm model.path=CKPT) into
    the run directory besides what forge rollout writes. Ctrl-C or SIGTERM leaves a resumable run.

    trainer=verl hands the same experiment to veRL 0.9.1 on GPUs (its own step loop, forge's harness rollouts as its
    agent loop); --dry-run prints veRL's command line and which veRL key each forge option sets.

    Examples: forge train trainer.steps=4 | forge train algo=dapo runtime=docker | forge train --resume runs/RUN |
    forge train --dry-run trainer=verl trainer.n_gpus_per_node=1
    """
    exp, data = experiment("train", overrides, config_dir, resume)
    exp, data, fitted, context_note = _checked(exp, data, overrides, resume)
    if not dry_run:  # the harness drift guard: a harness that is not its fingerprinted version is checked first
        from forge_cli.cli.harness_fingerprint_cmd import guard_before_train

        guard_before_train(exp.harness.name, config_dir, exp.runtime.kind, exp.harness.package.version)
    # the trainer backend's own entry (trainer.kind's options class names it: config/training.py)
    module, _, name = type(exp.trainer).runner.partition(":")
    runner = getattr(importlib.import_module(module), name)
    runner(exp, data, fitted=fitted, context_note=context_note, resume=resume, dry_run=dry_run, as_json=as_json)


def _check_algorithms(exp: Experiment) -> None:
    """The advantage estimator and policy loss the experiment names are registered (exit 2 naming those that are)."""
    from forge_cli.train.algos import get_adv_estimator_fn, get_policy_loss_fn

    for key, value, lookup in (("algo.advantage", exp.algo.advantage, get_adv_estimator_fn),
                               ("algo.policy_loss", exp.algo.policy_loss, get_policy_loss_fn)):
        try:
            lookup(value)
        except ValueError as exc:
            raise UserError(f"{key}={value}: {exc}", fix=f"set {key} to a registered name, or install the package "
                            "that registers it", exit_code=2) from None


def _loggers(exp: Experiment) -> str:
    """Where each step's metrics go (``trainer.loggers``), in words; UserError (exit 2) for a logger that is not
    registered or whose client is not installed, before anything starts."""
    from forge_cli.train.metrics_log import logger_classes

    run_dir = Path(exp.run.output_dir) / "<run>"
    return ", ".join([f"metrics: {run_dir / 'metrics.jsonl'}",
                      *(f"{cls.name} ({cls.where(run_dir) or 'its own'})" for cls in
                        logger_classes(exp.trainer.loggers))])


def train_local(exp: Experiment, data: dict[str, Any], *, fitted: Experiment, context_note: str | None,
                resume: Path | None, dry_run: bool, as_json: bool) -> None:
    """``forge train`` with forge's own trainer (``trainer=local``): the plan, or the step loop to its summary."""
    _check_algorithms(exp)
    loggers = _loggers(exp)
    if dry_run:
        from forge_cli.rollout.plan import build_plan
        from forge_cli.train.backend import backend_class

        backend_class(exp.trainer.kind)  # a plan only for what can run
        from forge_cli.rollout.plan_view import show

        plan = build_plan(exp, purpose="train")  # fits the context as the run does, and notes it
        t = exp.trainer
        steps = (f"train: {t.steps} steps x {t.tasks_per_step} tasks x {exp.algo.group_size} rollouts "
                 f"({plan.num_tasks} tasks in split '{plan.tasks.get('split')}'), algo {exp.algo.name}, trainer "
                 f"{t.kind} (lr {t.learning_rate}, micro-batches of {t.micro_batch_tokens} tokens, max_seq_len "
                 f"{t.max_seq_len}{', LoRA rank ' + str(t.lora.rank) if t.lora else ''}{_precision(exp)}); after "
                 f"each step the new weights are reloaded by the policy server"
                 + (f"; the run ends after the step in which the policy server has sampled {t.max_sampled_tokens} "
                    f"completion tokens in all (its vLLM counters), {t.steps} steps at most"
                    if t.max_sampled_tokens else "")
                 + (f" (the next step's rollouts may run up to {t.max_staleness} update(s) behind)"
                    if t.max_staleness else "")
                 + (f"; every {t.eval_every} steps and after the last, split '{t.eval_split or 'default eval'}' "
                    f"x {exp.eval.trials} trial(s) is evaluated at "
                    + (f"temperature {exp.eval.temperature}" if exp.eval.temperature is not None
                       else "the training sampling")
                    if t.eval_every else ""))
        if as_json:
            typer.echo(json.dumps({**plan.to_dict(), "train": steps, "loggers": loggers}, indent=2))
        else:
            show(plan)
            typer.echo(steps)
            typer.echo(f"logs: {loggers}")
        return
    from rich.console import Console

    from forge_cli.cli.signals import stop_on_signals
    from forge_cli.train.loop import run_training

    console = Console(stderr=True, highlight=False, soft_wrap=True)
    if context_note is not None:
        console.print(context_note, markup=False)
    exp = fitted
    where = str(resume) if resume else f"{exp.run.output_dir}/<run>"
    started = time.time()
    with stop_on_signals(lambda: f"the run stops at its last checkpoint; continue with: forge train --resume "
                                 f"{resume or _newest_run(exp, started) or where}"):
        # a failed weight sync or a policy server gone mid-step is a PolicyServerLost (exit 1, with the resume
        # command) raised inside the loop (forge_cli/train/step.py)
        summary = run_training(exp, data, lambda m: console.print(m, markup=False), resume=resume)
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
    else:
        from forge_cli.config.loggers import logger_class

        logs = "".join(f"  {name}: {logger_class(name).where(Path(summary['run_dir'])) or 'on'}\n"
                       for name in exp.trainer.loggers)
        typer.echo(f"run {summary['run_id']}: {summary['steps']} steps in {summary['duration_s']} s\n"
                   f"  run directory: {summary['run_dir']}\n  metrics: {summary['metrics']}\n{logs}"
                   f"  checkpoints: {', '.join(summary['checkpoints']) or '-'}")


def _precision(exp: Experiment) -> str:
    """The local trainer's numerics as the run will pick them (``trainer.precision`` auto resolved on a CPU)."""
    t = exp.trainer
    if t.kind != "local":
        return ""
    if t.precision == "auto" and getattr(exp.model, "device", "cpu") == "cpu":
        from forge_cli.train.local import uses_bf16

        return f", precision auto: {'bf16 autocast' if uses_bf16('auto', 'cpu') else 'float32'} on this CPU"
    return f", precision {t.precision}"


def _checked(exp: Experiment, data: dict[str, Any], overrides: list[str] | None, resume: Path | None
             ) -> tuple[Experiment, dict[str, Any], Experiment, str | None]:
    """forge train's input checks before anything starts (UserError exit 2): one group size, overlong shaping
    inside the output limit, a served context that holds the harness's first prompt (or ``model.auto_context``
    raising it: the note says so), a resumed checkpoint of the experiment's model. Returns the experiment and its
    data with the group size settled, the experiment to run (its context fitted) and the note."""
    from forge_cli.config.schema import OpenAICompatibleModel
    from forge_cli.errors import UserError
    from forge_cli.rollout.plan import fit_context
    from forge_cli.train.checks import group_size, overlong_fits, resume_checkpoint_matches

    if isinstance(exp.model, OpenAICompatibleModel):  # the run refuses it too (train/loop.py): so does its plan
        raise UserError("forge train needs weights it can update: model=openai-compatible serves a policy forge "
                        "cannot train", fix="use the default model, or model=vllm model.path=DIR", exit_code=2)
    exp, data = group_size(exp, data, overrides)
    overlong_fits(exp)
    fitted, note = fit_context(exp)
    if resume is not None and exp.trainer.kind == "local":
        resume_checkpoint_matches(fitted, resume)
    return exp, data, fitted, note


def _newest_run(exp: Experiment, since: float) -> Path | None:
    """The run directory this command created (the newest of its name under run.output_dir since ``since``)."""
    root = Path(exp.run.output_dir).expanduser().resolve()
    runs = [p for p in root.glob(f"{exp.run.name}-*") if p.is_dir() and p.stat().st_mtime >= since - 1]
    return max(runs, key=lambda p: p.stat().st_mtime) if runs else None
