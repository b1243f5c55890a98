"""How ``forge train trainer=verl`` has veRL 0.9.1 load and serve the policy (``mapping.Serving``), checked where veRL
and vLLM consume it rather than in forge's printout:

- the actor: veRL's own ``HFModelConfig`` builds the model config from the plan's ``override_config`` (sdpa without
  flash-attention, the YaRN length that veRL's ``max_model_len`` check reads), and the same transformers in veRL's
  environment shows why ``use_remove_padding`` is off with sdpa (packed rows attend across each other);
- the replicas: veRL's RolloutConfig yields the engine kwargs as ``vLLMHttpServer.launch_server`` reads them; veRL's
  own ``build_cli_args_from_config`` (its source, run beside vLLM) turns them into ``vllm serve`` arguments; vLLM's
  own parser, its serve-argument validation and its engine config receive them (tool calling with forge's parser,
  forge's chat template, the served name ``policy``, and the context past the native length).

veRL's environment has no vLLM (CPU torch) and forge's vLLM environment no veRL, so each half runs in its own.
"""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from forge_cli.paths import env_python
from tests.helpers import forge
from tests.requires import requires

# veRL's config composed from the dry run's command (sys.argv[1]: the plan), as main_ppo composes it
COMPOSED = r'''
import json, os, sys
from hydra import compose, initialize_config_dir
import verl
from verl.utils.config import omega_conf_to_dataclass
plan = json.load(open(sys.argv[1]))
argv = plan["command"]
with initialize_config_dir(config_dir=os.path.join(os.path.dirname(verl.__file__), "trainer", "config"),
                           version_base=None):
    cfg = compose(config_name=argv[3].split("=", 1)[1], overrides=argv[4:])
'''

ACTOR = COMPOSED + r'''
import torch
from verl.workers.config.model import HFModelConfig
from verl.workers.rollout.utils import get_max_position_embeddings
from transformers import AutoModelForCausalLM
model = omega_conf_to_dataclass(cfg.actor_rollout_ref.model, dataclass_type=HFModelConfig)
out = {"attn": model.hf_config._attn_implementation, "remove_padding": cfg.actor_rollout_ref.model.use_remove_padding,
       "max_positions": get_max_position_embeddings(model.hf_config),
       "max_model_len": cfg.actor_rollout_ref.rollout.max_model_len}
torch.manual_seed(0)
net = AutoModelForCausalLM.from_config(model.hf_config, attn_implementation=out["attn"]).eval()
a, b = torch.randint(0, 1000, (1, 9)), torch.randint(0, 1000, (1, 6))
with torch.no_grad():  # one row at a time, then packed as use_remove_padding packs them (positions restart)
    alone = net(input_ids=b).logits
    packed = net(input_ids=torch.cat([a, b], 1), attention_mask=None,
                 position_ids=torch.cat([torch.arange(9), torch.arange(6)]).unsqueeze(0)).logits[:, 9:]
out["packed_diff"] = float((packed - alone).abs().max())
try:
    AutoModelForCausalLM.from_config(model.hf_config, attn_implementation="flash_attention_2")
    out["flash"] = "loads"
except (ImportError, ValueError) as e:
    out["flash"] = type(e).__name__
print(json.dumps(out))
'''

ENGINE = COMPOSED + r'''
rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
# vLLMHttpServer.launch_server, verl/workers/rollout/vllm_rollout/vllm_async_server.py
kwargs = rollout.get("engine_kwargs", {}).get("vllm", {}) or {}
kwargs = {k: v for k, v in kwargs.items() if v is not None}
print(json.dumps({"engine_kwargs": kwargs, "max_model_len": rollout.max_model_len,
                  "model": cfg.actor_rollout_ref.model.path,
                  "source": os.path.join(os.path.dirname(verl.__file__), "workers", "rollout", "vllm_rollout",
                                         "utils.py")}))
'''

VLLM = r'''
import dataclasses, functools, json, sys
from typing import Any, get_args
from vllm.engine.arg_utils import AsyncEngineArgs
try:  # vLLM 0.24 (veRL's) / 0.32 (forge's CPU server)
    from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args
except ImportError:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
from vllm.utils.argparse_utils import FlexibleArgumentParser
given = json.load(open(sys.argv[1]))
namespace = {"dataclasses": dataclasses, "functools": functools, "json": json, "Any": Any, "get_args": get_args}
exec(compile(open(sys.argv[2]).read(), "verl-utils", "exec"), namespace)  # veRL's two functions, verbatim
args = {"max_model_len": given["max_model_len"], "dtype": "float32", **given["engine_kwargs"]}
cli = namespace["build_cli_args_from_config"](args)
parsed = make_arg_parser(FlexibleArgumentParser()).parse_args(["--model", given["model"], *cli])
validate_parsed_serve_args(parsed)
config = AsyncEngineArgs.from_cli_args(parsed).create_model_config()
rope = getattr(config.hf_config, "rope_parameters", None) or {}
print(json.dumps({"cli": cli, "auto_tool_choice": parsed.enable_auto_tool_choice,
                  "tool_call_parser": parsed.tool_call_parser, "chat_template": parsed.chat_template,
                  "served": parsed.served_model_name, "max_model_len": config.max_model_len,
                  "max_positions": config.hf_config.max_position_embeddings, "rope_type": rope.get("rope_type")}))
'''


def _dry_run(tmp_path: Path, *overrides: str) -> dict[str, Any]:
    result = forge("train", "--dry-run", "--json", "trainer=verl", "trainer.n_gpus_per_node=1",
                   f"run.output_dir={tmp_path / 'runs'}", *overrides, timeout=300)
    assert result.returncode == 0, result.stderr
    plan: dict[str, Any] = json.loads(result.stdout)
    (tmp_path / "plan.json").write_text(result.stdout)
    return plan


def _run(python: Path, script: str, tmp_path: Path, *args: str) -> dict[str, Any]:
    (tmp_path / "script.py").write_text(script)
    done = subprocess.run([str(python), str(tmp_path / "script.py"), *args], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _verl_functions(source: Path, out: Path) -> Path:
    """veRL's ``build_cli_args_from_config`` and the helper it calls, cut verbatim from its file (which imports vLLM
    modules veRL's CPU environment lacks)."""
    text = source.read_text()
    wanted = {"_optional_bool_vllm_args", "build_cli_args_from_config"}
    nodes = [n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    assert {n.name for n in nodes} == wanted, "veRL moved the functions that build vLLM's serve arguments"
    out.write_text("\n\n".join(ast.get_source_segment(text, n, padded=False) or "" for n in nodes))
    return out


@pytest.mark.requires("verl", "model")
def test_actor_loads_with_sdpa_and_no_packing(tmp_path: Path) -> None:
    plan = _dry_run(tmp_path, "model.max_model_len=16384")
    got = _run(env_python("verl"), ACTOR, tmp_path, str(tmp_path / "plan.json"))
    assert got["flash"] == "ImportError"  # veRL's default (flash_attention_2) cannot load here: what forge avoids
    assert got["attn"] == "sdpa" and got["remove_padding"] is False
    # with sdpa, a packed row's logits differ from the same row alone: packing would train on wrong logprobs
    assert got["packed_diff"] > 1e-2, got
    # veRL's rollout check (max_model_len <= max_position_embeddings) passes with the YaRN length
    assert got["max_positions"] >= got["max_model_len"] == 16384
    assert plan["config"]["actor_rollout_ref.model.override_config"] == {
        "attn_implementation": "sdpa", "max_position_embeddings": 16384}


@pytest.mark.e2e  # two vLLM starts with veRL's replica arguments (~37 s): make test-e2e, keeping make test under 40 min
@pytest.mark.requires("verl", "vllm", "model")
@pytest.mark.parametrize(("overrides", "length"), [([], 8192), (["model.max_model_len=16384"], 16384)],
                         ids=["native", "yarn"])
def test_replica_arguments_reach_vllm(tmp_path: Path, overrides: list[str], length: int) -> None:
    _dry_run(tmp_path, *overrides)
    given = _run(env_python("verl"), ENGINE, tmp_path, str(tmp_path / "plan.json"))
    (tmp_path / "given.json").write_text(json.dumps(given))
    functions = _verl_functions(Path(given["source"]), tmp_path / "verl_functions.py")
    requires("vllm")
    got = _run(env_python("vllm"), VLLM, tmp_path, str(tmp_path / "given.json"), str(functions))
    assert got["auto_tool_choice"] is True and got["tool_call_parser"] == "hermes", got["cli"]
    assert got["served"] == ["policy"]
    assert Path(got["chat_template"]) == Path(given["model"]) / "chat_template.jinja"
    assert got["max_model_len"] == got["max_positions"] == length
    assert got["rope_type"] == ("yarn" if length > 8192 else "default")
