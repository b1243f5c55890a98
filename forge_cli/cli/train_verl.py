"""``forge train trainer=verl``: the plan (``--dry-run``), the launch, and ``--resume`` as veRL's own resume."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from forge_cli.config.schema import Experiment
    from forge_cli.train.verl.launch import VerlLaunch


def _get(data: dict[str, Any], dotted: str) -> Any:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def describe(exp: Experiment, launch: VerlLaunch) -> str:
    """The plan as text: what runs where, the command, and each forge option with the veRL key it sets."""
    from forge_cli.train.verl import mapping
    from forge_cli.train.verl.options import verl_options

    t = verl_options(exp)
    data = exp.model_dump(mode="json")
    lines = [f"veRL {mapping.VERL_VERSION} (trainer=verl): {t.steps} steps x {t.tasks_per_step} tasks x "
             f"{exp.algo.group_size} rollouts of {len(launch.train_tasks)} train tasks "
             f"({len(launch.val_tasks)} validation rows), algo {exp.algo.name}, harness {exp.harness.name} in "
             f"{exp.runtime.kind} sandboxes behind forge's capture proxy; "
             + (f"Ray cluster {t.ray_address}" if t.ray_address else f"local Ray, {t.n_gpus_per_node} GPU(s) x "
                f"{t.nnodes} node(s)"),
             f"run directory: {launch.run_dir} (checkpoints/, tensorboard/, verl/main_ppo.log, rollouts/)",
             "command (veRL's environment; written to verl/command.sh"
             + (", with " + " ".join(f"{k}={v}" for k, v in launch.env.items()) if launch.env else "") + "):",
             "  " + mapping.shell_line(launch.argv), "forge option -> veRL key:"]
    for forge_key, verl_key in mapping.MAPPING:
        if verl_key in launch.mapped:
            lines.append(f"  {forge_key}={json.dumps(_get(data, forge_key))} -> {verl_key}="
                         f"{json.dumps(launch.mapped[verl_key])}")
    return "\n".join(lines + serving_lines(exp, launch.inputs.serving))


def serving_lines(exp: Experiment, serving: Any) -> list[str]:
    """How veRL's actor loads the policy and its replicas serve it (``mapping.Serving``), for the plan."""
    attention = ("flash_attention_2 (flash_attn imports in veRL's environment), use_remove_padding on" if
                 serving.flash_attn else "sdpa (flash_attn does not import in veRL's environment), use_remove_padding "
                 "off (sdpa would attend across packed rows)")
    tools = (f"--enable-auto-tool-choice --tool-call-parser {serving.tool_call_parser}" if serving.tool_call_parser
             else "off (model.tool_call_parser is null)")
    context = (f"{exp.model.max_model_len} tokens with YaRN (factor {serving.context['rope_parameters']['factor']:g}"
               f" over the native {serving.context['rope_parameters']['original_max_position_embeddings']})"
               if serving.context else f"{exp.model.max_model_len} tokens (within the model's native context)")
    return ["policy in veRL:", f"  actor attention: {attention}",
            f"  replicas: served as {serving.served_name!r}; tool calls {tools}; chat template "
            f"{serving.chat_template or 'the model' + chr(39) + 's own'}", f"  context: {context}"]


def run(exp: Experiment, data: dict[str, Any], *, fitted: Experiment, context_note: str | None,
        resume: Path | None, dry_run: bool, as_json: bool) -> None:
    """``forge train`` with ``trainer=verl`` (its options class's runner): veRL runs the experiment as fitted."""
    train_verl(fitted, data, resume=resume, dry_run=dry_run, as_json=as_json)


def train_verl(exp: Experiment, data: dict[str, Any], *, resume: Path | None, dry_run: bool, as_json: bool) -> None:
    from rich.console import Console

    from forge_cli.rollout.session import new_run_id
    from forge_cli.train.verl import launch as verl

    run_dir = resume.resolve() if resume is not None else (
        Path(exp.run.output_dir).expanduser().resolve() / new_run_id(exp))
    plan = verl.plan(exp, run_dir, resume=resume is not None)
    console = Console(stderr=True, highlight=False, soft_wrap=True)
    if dry_run:
        if as_json:
            typer.echo(json.dumps(plan.to_dict(), indent=2))
        else:
            typer.echo(describe(exp, plan))
            if not verl.verl_python().is_file():
                console.print("note: veRL's environment is not installed here (scripts/setup.sh verl)", markup=False)
        return
    verl.preflight(exp)
    verl.write_inputs(plan, data)
    if resume is None:
        from forge_cli.rollout import manifest

        manifest.write(run_dir, exp, data)
    console.print(describe(exp, plan), markup=False)
    started = time.time()
    code = verl.run(plan, lambda m: console.print(m, markup=False))
    took = round(time.time() - started)
    if code != 0:
        console.print(f"error: veRL exited with status {code} after {took} s; its log: {run_dir}/verl/main_ppo.log\n"
                      f"  continue from its last checkpoint with: forge train --resume {run_dir}", markup=False)
        raise typer.Exit(1)
    from forge_cli.train.verl.checkpoints import actor_dir, merge

    # the last checkpoint as a Hugging Face directory forge serves (forge model merge-verl does any other)
    actor = actor_dir(run_dir)
    merged = merge(actor, Path(plan.inputs.model_path), verl.verl_python(),
                   backend="megatron" if getattr(exp.trainer, "strategy", "") == "megatron" else "fsdp")
    summary = {"run_dir": str(run_dir), "duration_s": took, "checkpoints": str(run_dir / "checkpoints"),
               "merged": str(merged), "tensorboard": str(run_dir / "tensorboard")}
    typer.echo(json.dumps(summary, indent=2) if as_json else
               f"veRL run finished in {took} s\n  run directory: {run_dir}\n  checkpoints: {run_dir}/checkpoints\n"
               f"  last checkpoint merged: {merged} (forge serve model=vllm model.path={merged})\n"
               f"  tensorboard: tensorboard --logdir {run_dir}/tensorboard")
