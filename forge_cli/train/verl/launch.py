"""``forge train trainer=verl``: write what veRL reads into the run directory and launch ``verl.trainer.main_ppo``.

Runs in forge's own environment (no veRL import). The run directory gets:

- ``config.yaml``: forge's experiment (what every veRL agent-loop worker composes its rollout session from);
- ``verl/train.parquet`` / ``verl/val.parquet``: the task table veRL's dataloader reads, one row per forge task
  (``prompt`` as chat messages, ``data_source``, ``agent_name``, ``forge_task_id``, ``forge_split``);
- ``verl/agent_loops.yaml``: registers ``ForgeHarnessAgentLoop`` under ``forge_harness`` with the config path;
- ``verl/command.sh``: the exact command, for rerunning by hand;
- ``checkpoints/``, ``tensorboard/`` and ``verl/main_ppo.log`` as veRL writes them.

The command is veRL's environment's Python (``$FORGE_HOME/envs/verl``, ``scripts/setup.sh verl`` installs veRL and
forge into it) running ``main_ppo`` with ``mapping.overrides``; on a Ray cluster given by ``trainer.ray_address``
(``RAY_ADDRESS``, read by ``ray.init``), else on a local Ray that veRL starts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from forge_cli.errors import UserError
from forge_cli.paths import env_python
from forge_cli.train.verl import mapping
from forge_cli.train.verl.checks import check_verl
from forge_cli.train.verl.options import verl_options

if TYPE_CHECKING:
    from forge_cli.config.schema import Experiment
    from forge_cli.envs.task import Task


@dataclass
class VerlLaunch:
    """A planned veRL run: where it writes, the mapped config and the command."""

    run_dir: Path
    inputs: mapping.Inputs
    mapped: dict[str, Any]
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    train_tasks: list[Task] = field(default_factory=list)
    val_tasks: list[Task] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"run_dir": str(self.run_dir), "command": self.argv, "env": self.env, "config": self.mapped,
                "mapping": [{"forge": f, "verl": v} for f, v in mapping.MAPPING],
                "train_tasks": len(self.train_tasks), "val_tasks": len(self.val_tasks)}


def verl_python() -> Path:
    return env_python("verl")


def _model_path(exp: Experiment) -> str:
    """The policy's Hugging Face directory (the default model's converted copy when ``model.path`` is unset)."""
    from forge_cli.config.schema import OpenAICompatibleModel
    from forge_cli.serve.prepare import default_model_dir, model_path

    model = exp.model
    assert not isinstance(model, OpenAICompatibleModel)  # refused by mapping.unsupported
    if model.path is not None:
        return str(model_path(model))
    return str(default_model_dir())


def flash_attn_available() -> bool:
    """``flash_attn`` imports in veRL's environment (False without that environment: the plan then says sdpa)."""
    python = verl_python()
    if not python.is_file():
        return False
    try:
        probe = subprocess.run([str(python), "-c", "import flash_attn"], capture_output=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def serving(exp: Experiment, model_path: str) -> mapping.Serving:
    """How veRL's actor and replicas load and serve the policy, as forge's own server would (``mapping.Serving``);
    UserError exit 2 when ``model.max_model_len`` exceeds what ``model.context_extension`` allows."""
    from forge_cli.config.schema import OpenAICompatibleModel, SmolModel
    from forge_cli.serve.server import context_extension

    model = exp.model
    assert not isinstance(model, OpenAICompatibleModel)  # refused by mapping.unsupported
    template = Path(model.chat_template).expanduser().resolve() if model.chat_template else None
    if template is None and isinstance(model, SmolModel) and model.path is None:
        template = Path(model_path) / "chat_template.jinja"  # the default model's converted copy carries forge's
    return mapping.Serving(flash_attn=flash_attn_available(), served_name=model.served_name,
                           tool_call_parser=model.tool_call_parser,
                           chat_template=str(template) if template is not None else None,
                           context=context_extension(model, Path(model_path)))


def _tasks(exp: Experiment) -> tuple[list[Task], list[Task], bool]:
    """The train split's tasks and the eval split's (the train tasks again when the env has none)."""
    from forge_cli.envs.source import load_tasks

    train = load_tasks(exp.env, exp.rollout.max_tasks, purpose="train")
    env = exp.env.model_copy(update={"split": exp.trainer.eval_split, "task_ids": None, "max_tasks": None})
    try:
        val = load_tasks(env, exp.trainer.eval_max_tasks, purpose="validate")
    except UserError:
        if exp.trainer.eval_every:
            raise
        return train.tasks, train.tasks, False
    return train.tasks, val.tasks, val.split != train.split


def plan(exp: Experiment, run_dir: Path, *, resume: bool = False) -> VerlLaunch:
    """The launch for ``exp`` into ``run_dir`` (nothing written); UserError exit 2 for what veRL cannot do."""
    mapping.check_supported(exp)
    train, val, has_eval = _tasks(exp)
    verl_dir = run_dir / "verl"
    model_path = _model_path(exp)
    inputs = mapping.Inputs(run_dir=run_dir, model_path=model_path, train_files=verl_dir / "train.parquet",
                            val_files=verl_dir / "val.parquet", agent_loops=verl_dir / "agent_loops.yaml",
                            num_tasks=len(train), has_eval_split=has_eval, serving=serving(exp, model_path))
    if len(train) < exp.trainer.tasks_per_step:
        raise UserError(f"trainer.tasks_per_step={exp.trainer.tasks_per_step} is more than the {len(train)} tasks of "
                        "the train split: veRL's dataloader drops an incomplete last batch, so no step would run",
                        fix=f"trainer.tasks_per_step={len(train)} (or fewer)", exit_code=2)
    mapped = mapping.overrides(exp, inputs, resume=resume)
    env = mapping.logger_env(exp.trainer.loggers, run_dir, dict(os.environ))
    ray_address = verl_options(exp).ray_address
    if ray_address:
        env["RAY_ADDRESS"] = ray_address
    return VerlLaunch(run_dir=run_dir, inputs=inputs, mapped=mapped, argv=mapping.command(verl_python(), exp, mapped),
                      env=env, train_tasks=train, val_tasks=val)


def _rows(tasks: list[Task], env_name: str, split: str) -> dict[str, list[Any]]:
    return {
        "prompt": [[{"role": "user", "content": t.instruction}] for t in tasks],
        "data_source": [f"forge/{env_name}" for _ in tasks],
        "agent_name": [mapping.AGENT_NAME for _ in tasks],
        "forge_task_id": [t.id for t in tasks],
        "forge_split": [split for _ in tasks],
        "extra_info": [{"index": i, "forge_task_id": t.id} for i, t in enumerate(tasks)],
    }


def write_inputs(launch: VerlLaunch, data: dict[str, Any]) -> None:
    """The run directory's config, task tables, agent-loop registration and command script."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    verl_dir = launch.run_dir / "verl"
    verl_dir.mkdir(parents=True, exist_ok=True)
    config = launch.run_dir / "config.yaml"
    if not config.exists():
        config.write_text(yaml.safe_dump(data, sort_keys=False))
    env_name = str(data.get("env", {}).get("name", "env"))
    pq.write_table(pa.table(_rows(launch.train_tasks, env_name, "train")), launch.inputs.train_files)
    pq.write_table(pa.table(_rows(launch.val_tasks, env_name, "eval")), launch.inputs.val_files)
    launch.inputs.agent_loops.write_text(yaml.safe_dump([{
        "name": mapping.AGENT_NAME, "_target_": mapping.AGENT_LOOP_TARGET, "forge_config": str(config),
        "forge_rollouts_dir": str(launch.run_dir / "rollouts")}], sort_keys=False))
    exports = "".join(f"export {k}={v}\n" for k, v in launch.env.items())
    script = verl_dir / "command.sh"
    script.write_text(f"#!/usr/bin/env bash\n# written by forge train trainer=verl\ncd {launch.run_dir}\n{exports}"
                      f"exec {mapping.shell_line(launch.argv)}\n")
    script.chmod(0o755)


def preflight(exp: Experiment) -> None:
    """The machine can launch veRL (``forge doctor trainer=verl``'s checks) and veRL's environment loads forge's
    agent loop; UserError exit 1 with each fix otherwise (the machine must be fixed, not the experiment)."""
    missing = [c for c in check_verl(exp) if not c.ok]
    if missing:
        raise UserError("trainer=verl cannot start on this machine:\n  "
                        + "\n  ".join(f"{c.name}: {c.detail}" for c in missing),
                        fix="; ".join(dict.fromkeys(c.fix for c in missing if c.fix)))
    probe = subprocess.run([str(verl_python()), "-c", "import forge_cli.remote.verl.agent_loop"],
                           capture_output=True, text=True, timeout=300, check=False)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"veRL's environment cannot load forge's agent loop: {last}",
                        fix="scripts/setup.sh verl (installs forge into veRL's environment)")


def run(launch: VerlLaunch, say: Callable[[str], None]) -> int:
    """Run ``main_ppo`` in the run directory, its output to the terminal and ``verl/main_ppo.log``; returns its exit
    status. Ctrl-C / SIGTERM reach veRL's process group, which stops its Ray workers."""
    log_path = launch.run_dir / "verl" / "main_ppo.log"
    say(f"veRL: {launch.run_dir / 'verl' / 'command.sh'} (log {log_path})")
    with log_path.open("ab") as log:
        proc = subprocess.Popen(launch.argv, cwd=launch.run_dir, env={**os.environ, **launch.env},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

        def forward(signum: int, _frame: Any) -> None:
            os.killpg(proc.pid, signum)

        for s in previous:
            signal.signal(s, forward)
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                log.flush()
                sys.stderr.buffer.write(line)
                sys.stderr.flush()
            return proc.wait()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
