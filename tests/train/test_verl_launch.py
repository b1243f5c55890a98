"""``forge train trainer=verl``: the mapping onto veRL 0.9.1's Hydra config, composed by veRL itself; the inputs it
writes, read by veRL's own dataset and agent-loop registry; bad input and a machine without GPUs.

The tests marked with the veRL environment run its Python (``scripts/setup.sh verl``) as a subprocess: Hydra
composes veRL's own ``ppo_trainer`` / ``ppo_megatron_trainer`` with the dry run's arguments (a renamed key fails) and
veRL's typed configs (``omega_conf_to_dataclass``: ``FSDPActorConfig`` with its checks, ``RolloutConfig``,
``AlgoConfig``) are built from the result.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from forge_cli.config.compose import compose
from forge_cli.paths import env_python
from forge_cli.train.verl import mapping
from forge_cli.train.verl.launch import plan, write_inputs
from tests.helpers import forge
from tests.requires import requires

REPO = Path(__file__).resolve().parents[2]

COMPOSE = r'''
import json, os, sys
from hydra import compose, initialize_config_dir
import verl
from verl.utils.config import omega_conf_to_dataclass
from omegaconf import OmegaConf
argv = json.load(open(sys.argv[1]))["command"]
name, args = argv[3].split("=", 1)[1], argv[4:]
with initialize_config_dir(config_dir=os.path.join(os.path.dirname(verl.__file__), "trainer", "config"),
                           version_base=None):
    cfg = compose(config_name=name, overrides=args)
actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
algo = omega_conf_to_dataclass(cfg.algorithm)
actor.validate(n_gpus=cfg.trainer.n_gpus_per_node * cfg.trainer.nnodes, train_batch_size=cfg.data.train_batch_size)
out = {"flat": {}}
def walk(node, prefix):
    for k, v in node.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            walk(v, key + ".")
        else:
            out["flat"][key] = v
walk(OmegaConf.to_container(cfg, resolve=False), "")
out["typed"] = {"clip_ratio_high": actor.clip_ratio_high, "loss_agg_mode": actor.loss_agg_mode, "n": rollout.n,
                "temperature": rollout.temperature, "adv_estimator": algo.adv_estimator,
                "rollout_is": cfg.algorithm.rollout_correction.rollout_is, "filter_groups": algo.filter_groups.enable,
                "use_kl_loss": actor.use_kl_loss, "lr": actor.optim.lr,
                # as vLLMHttpServer.launch_server reads its engine kwargs, and HFModelConfig its model overrides
                "actor_rollout_ref.rollout.engine_kwargs.vllm": rollout.get("engine_kwargs", {}).get("vllm", {}),
                "actor_rollout_ref.model.override_config": dict(cfg.actor_rollout_ref.model.override_config),
                # what _build_replay_buffer hands a custom sampler
                "trainer.v1.sampler.sampler_kwargs": dict(cfg.trainer.v1.sampler.sampler_kwargs)}
print(json.dumps(out))
'''

DATASET = r'''
import json, sys
import hydra
from omegaconf import OmegaConf
from transformers import AutoTokenizer
from verl.utils.dataset.rl_dataset import RLHFDataset
plan = json.load(open(sys.argv[1]))
config = plan["config"]
tokenizer = AutoTokenizer.from_pretrained(config["actor_rollout_ref.model.path"])
data = OmegaConf.create({"prompt_key": "prompt", "max_prompt_length": config["data.max_prompt_length"],
                         "return_raw_chat": True, "filter_overlong_prompts": False, "truncation": "error"})
rows = RLHFDataset(data_files=[config["data.train_files"]], tokenizer=tokenizer, config=data)
first = rows[0]
registry = OmegaConf.load(config["actor_rollout_ref.rollout.agent.agent_loop_config_path"])
entry = registry[0]
cls = hydra.utils.get_class(entry._target_)
print(json.dumps({"rows": len(rows), "task": str(first["forge_task_id"]), "agent": str(first["agent_name"]),
                  "raw_prompt": first["raw_prompt"], "name": entry.name, "class": cls.__name__,
                  "forge_config": entry.forge_config}))
'''


def _verl() -> Path:
    requires("verl")
    return env_python("verl")


def _dry_run(tmp_path: Path, *overrides: str) -> dict[str, Any]:
    result = forge("train", "--dry-run", "--json", "trainer=verl", "trainer.n_gpus_per_node=1",
                   f"run.output_dir={tmp_path}", *overrides, timeout=300)
    assert result.returncode == 0, result.stderr
    plan_json: dict[str, Any] = json.loads(result.stdout)
    return plan_json


def _in_verl(script: str, plan_json: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    (tmp_path / "plan.json").write_text(json.dumps(plan_json))
    (tmp_path / "script.py").write_text(script)
    done = subprocess.run([str(_verl()), str(tmp_path / "script.py"), str(tmp_path / "plan.json")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_mapping_pins_each_value() -> None:
    """Hand-checked: DAPO with KL and float32 on FSDP2, 2 GPUs, against veRL's keys."""
    exp = compose(["trainer=verl", "algo=dapo", "algo.kl_coef=0.01", "algo.tis_cap=3.0", "trainer.precision=float32",
                   "trainer.n_gpus_per_node=2", "trainer.tasks_per_step=8", "trainer.steps=5",
                   "rollout.sampling.temperature=0.9", "eval.trials=3", "eval.temperature=0"]).experiment
    inputs = mapping.Inputs(run_dir=Path("/r/run-1"), model_path="/m", train_files=Path("/r/t.parquet"),
                            val_files=Path("/r/v.parquet"), agent_loops=Path("/r/a.yaml"), num_tasks=20,
                            has_eval_split=True)
    got = mapping.overrides(exp, inputs)
    assert {k: got[k] for k in (
        "algorithm.adv_estimator", "actor_rollout_ref.rollout.n", "actor_rollout_ref.actor.clip_ratio_high",
        "actor_rollout_ref.actor.clip_ratio_c", "algorithm.filter_groups.enable",
        "algorithm.rollout_correction.rollout_is",
        "algorithm.rollout_correction.rollout_is_threshold", "actor_rollout_ref.actor.use_kl_loss",
        "actor_rollout_ref.actor.kl_loss_coef", "actor_rollout_ref.actor.fsdp_config.dtype", "data.train_batch_size",
        "actor_rollout_ref.actor.ppo_mini_batch_size", "trainer.total_training_steps", "trainer.total_epochs",
        "actor_rollout_ref.rollout.temperature", "actor_rollout_ref.rollout.val_kwargs.n",
        "actor_rollout_ref.rollout.val_kwargs.do_sample", "trainer.n_gpus_per_node", "trainer.resume_mode")} == {
        "algorithm.adv_estimator": "grpo", "actor_rollout_ref.rollout.n": 8,
        "actor_rollout_ref.actor.clip_ratio_high": 0.28, "actor_rollout_ref.actor.clip_ratio_c": 10.0,
        "algorithm.filter_groups.enable": True, "algorithm.rollout_correction.rollout_is": "token",
        "algorithm.rollout_correction.rollout_is_threshold": 3.0, "actor_rollout_ref.actor.use_kl_loss": True,
        "actor_rollout_ref.actor.kl_loss_coef": 0.01, "actor_rollout_ref.actor.fsdp_config.dtype": "float32",
        "data.train_batch_size": 8, "actor_rollout_ref.actor.ppo_mini_batch_size": 32,  # 8 tasks x 4 rows
        "trainer.total_training_steps": 5, "trainer.total_epochs": 3,  # 20 tasks / 8 = 2 batches an epoch
        "actor_rollout_ref.rollout.temperature": 0.9, "actor_rollout_ref.rollout.val_kwargs.n": 3,
        "actor_rollout_ref.rollout.val_kwargs.do_sample": False, "trainer.n_gpus_per_node": 2,
        "trainer.resume_mode": "disable"}
    assert mapping.overrides(exp, inputs, resume=True)["trainer.resume_mode"] == "auto"
    off = compose(["trainer=verl", "algo.tis_cap=null"]).experiment
    assert mapping.overrides(off, inputs)["algorithm.rollout_correction.rollout_is"] is None


def test_hydra_values() -> None:
    assert mapping.hydra_args({"a": None, "b": True, "c": 1e-06, "d": "/x/y.parquet", "e": ["console", "tb"],
                               "f": "has space", "g": "it's", "h": {"x": True, "y": {"z": 2.0}}}) == [
        "a=null", "b=true", "c=1e-06", "d=/x/y.parquet", "e=[console,tb]", "f='has space'", "g='it\\'s'",
        "++h={x:true,y:{z:2.0}}"]


def test_docs_table_lists_every_mapping_row() -> None:
    page = (REPO / "docs" / "verl.md").read_text()
    rows = set(re.findall(r"^\| `([a-z_.]+)` \| `([a-z_.0-9]+)` \|", page, flags=re.M))
    assert rows == set(mapping.MAPPING)


def test_every_mapped_key_is_set() -> None:
    exp = compose(["trainer=verl", "trainer.lora={rank:8}"]).experiment
    inputs = mapping.Inputs(Path("/r/x"), "/m", Path("/t"), Path("/v"), Path("/a"), 10, True)
    got = mapping.overrides(exp, inputs)
    assert [v for _, v in mapping.MAPPING if v not in got] == []


@pytest.mark.parametrize(("overrides", "needle"), [
    (["algo.dynamic_sampling=drop"], "algo.dynamic_sampling=drop"),
    (["algo.drop_group_on_infra=true"], "drop_group_on_infra"),
    (["algo.loss_agg_mode=seq-mean-token-sum"], "seq-mean-token-sum"),
    (["algo.epsilon=0.01"], "algo.epsilon=0.01"),
    (["trainer.max_staleness=1"], "max_staleness"),
    (["trainer.micro_batch_tokens=1024"], "micro_batch_tokens=1024"),
    (["trainer.tasks_per_step=500"], "tasks_per_step=500"),
    (["algo=rloo", "algo.loss_agg_mode=token-mean"], "algo.advantage=rloo"),
    (["trainer.ppo_mini_batches=2"], "trainer.ppo_mini_batches=2"),
    (["model=openai-compatible", "model.base_url=http://127.0.0.1:9/v1", "model.model=x"], "cannot train"),
])
def test_what_verl_cannot_do_is_one_message_exit_2(tmp_path: Path, overrides: list[str], needle: str) -> None:
    for dry in (["--dry-run"], []):
        result = forge("train", *dry, "trainer=verl", f"run.output_dir={tmp_path}", *overrides, timeout=300)
        assert result.returncode == 2, result.stderr
        assert needle in result.stderr and "fix" in result.stderr and "Traceback" not in result.stderr
    assert not any(tmp_path.iterdir())


@pytest.mark.requires("no-gpu")  # on a machine with GPUs the launch would start
def test_no_gpu_is_one_message_exit_1(tmp_path: Path) -> None:
    result = forge("train", "trainer=verl", "trainer.n_gpus_per_node=1", f"run.output_dir={tmp_path}", timeout=300)
    assert result.returncode == 1, result.stderr
    assert "GPU" in result.stderr and "fix:" in result.stderr and "Traceback" not in result.stderr
    assert not any(tmp_path.iterdir()), "nothing written before the machine can run it"


def test_dry_run_shows_command_and_mapping(tmp_path: Path) -> None:
    result = forge("train", "--dry-run", "trainer=verl", "trainer.n_gpus_per_node=1", f"run.output_dir={tmp_path}",
                   timeout=300)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "-m verl.trainer.main_ppo" in out and "--config-name=ppo_trainer" in out
    assert 'algo.group_size=4 -> actor_rollout_ref.rollout.n=4' in out
    assert "trainer.v1.trainer_mode=sync" in out
    assert "actor attention: sdpa" in out and "use_remove_padding off" in out
    assert "served as 'policy'; tool calls --enable-auto-tool-choice --tool-call-parser hermes" in out
    assert "context: 8192 tokens" in out
    assert not any(tmp_path.iterdir()), "a dry run writes nothing"


@pytest.mark.parametrize("overrides", [
    [],
    ["algo=dapo", "algo.kl_coef=0.01", "trainer.precision=float32", "trainer.eval_every=2"],
    ["algo=grpo", "algo.norm_adv_by_std=false", "trainer.lora={rank:8,alpha:16}"],
    ["trainer.strategy=megatron"],
    ["model.max_model_len=16384", "model.tool_call_parser=null"],
], ids=["grpo", "dapo-kl-float32", "grpo-unnormalised-lora", "megatron", "yarn-no-tools"])
def test_dry_run_config_is_accepted_by_verl(tmp_path: Path, overrides: list[str]) -> None:
    _verl()
    plan_json = _dry_run(tmp_path, *overrides)
    got = _in_verl(COMPOSE, plan_json, tmp_path)
    flat = got["flat"]
    for key, value in plan_json["config"].items():  # every override landed where veRL reads it
        if isinstance(value, dict):  # a whole node (++): read back through veRL's typed configs below
            assert got["typed"][key] == value, (key, got["typed"][key], value)
            continue
        assert key in flat, f"veRL's config has no {key}"
        if not isinstance(value, list):
            assert flat[key] == value, (key, flat[key], value)
    typed = got["typed"]
    assert typed["n"] == plan_json["config"]["actor_rollout_ref.rollout.n"]
    assert typed["adv_estimator"] == plan_json["config"]["algorithm.adv_estimator"]
    assert typed["rollout_is"] == "token"


def test_inputs_are_read_by_verl_dataset_and_registry(tmp_path: Path) -> None:
    _verl()
    composed = compose(["trainer=verl", "trainer.n_gpus_per_node=1", f"run.output_dir={tmp_path}",
                        "trainer.tasks_per_step=2"])
    exp = composed.experiment
    launch = plan(exp, tmp_path / "run-1")
    write_inputs(launch, exp.model_dump(mode="json"))
    got = _in_verl(DATASET, launch.to_dict(), tmp_path)
    assert got["rows"] == len(launch.train_tasks)
    assert got["task"] == launch.train_tasks[0].id and got["agent"] == mapping.AGENT_NAME
    assert got["raw_prompt"][0]["content"] == launch.train_tasks[0].instruction
    assert (got["name"], got["class"]) == (mapping.AGENT_NAME, "ForgeHarnessAgentLoop")
    assert Path(got["forge_config"]) == tmp_path / "run-1" / "config.yaml"
    assert (tmp_path / "run-1" / "verl" / "command.sh").read_text().count("verl.trainer.main_ppo") == 1


def test_no_verl_environment_is_one_message_exit_1(tmp_path: Path) -> None:
    """A machine without veRL's environment must be fixed (exit 1), and doctor names the same fix."""
    home = {"FORGE_HOME": str(tmp_path / "home")}
    result = forge("train", "trainer=verl", "trainer.ray_address=ray://127.0.0.1:10001",
                   f"run.output_dir={tmp_path / 'runs'}", env=home, timeout=300)
    assert result.returncode == 1, result.stderr
    assert "veRL environment" in result.stderr and "scripts/setup.sh verl" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "runs").exists()
    doctor = forge("doctor", "trainer=verl", env=home, timeout=300)
    assert doctor.returncode == 1 and "no veRL in" in doctor.stdout and "scripts/setup.sh verl" in doctor.stdout
