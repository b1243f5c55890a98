"""veRL checkpoints back to forge (``forge model merge-verl``, ``forge_cli/train/verl/checkpoints.py``).

The checkpoint is a real one: veRL 0.9.1's own ``FSDPCheckpointManager`` saves a SmolLM2 wrapped in FSDP2
(``fully_shard`` over a one-rank gloo mesh named ``fsdp``, as veRL's workers name it) after one AdamW step, in
veRL's environment on CPU; the layout is the run directory ``forge train trainer=verl`` gives veRL
(``checkpoints/global_step_N/actor``, ``latest_checkpointed_iteration.txt``). forge merges it with veRL's model
merger and the merged weights must equal the trained ones exactly.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from forge_cli.config.compose import compose
from forge_cli.paths import env_python
from forge_cli.serve.prepare import default_model_dir
from tests.helpers import forge
from tests.requires import requires

SAVE = r'''
import os, socket, sys
import torch, torch.distributed as dist
src, actor, expected = sys.argv[1], sys.argv[2], sys.argv[3]
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
dist.init_process_group("gloo")
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from transformers import AutoModelForCausalLM, AutoTokenizer
from omegaconf import OmegaConf
from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager
tok = AutoTokenizer.from_pretrained(src)
model = AutoModelForCausalLM.from_pretrained(src, torch_dtype=torch.float32)
mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("fsdp",))
for layer in model.model.layers:
    fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.tensor([tok.encode("The capital of France is Paris.")])
model(input_ids=ids, labels=ids).loss.backward()
opt.step()
cfg = OmegaConf.create({"save_contents": ["model", "optimizer", "extra"], "load_contents": ["model"]})
FSDPCheckpointManager(model, opt, None, processing_class=tok, checkpoint_config=cfg).save_checkpoint(
    local_path=actor, global_step=1)
state = model.state_dict()
full = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().clone() for k, v in state.items()}
torch.save(full, expected)
dist.destroy_process_group()
'''


@pytest.fixture(scope="module")
def verl_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory as forge train trainer=verl leaves it, with a real veRL actor checkpoint of step 1."""
    requires("verl", "model")
    python = env_python("verl")
    model = default_model_dir()
    run = tmp_path_factory.mktemp("verl-run")
    exp = compose(["trainer=verl", "trainer.n_gpus_per_node=1"]).experiment
    (run / "config.yaml").write_text(yaml.safe_dump(exp.model_dump(mode="json"), sort_keys=False))
    actor = run / "checkpoints" / "global_step_1" / "actor"
    (run / "save.py").write_text(SAVE)
    done = subprocess.run([str(python), str(run / "save.py"), str(model), str(actor), str(run / "expected.pt")],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    (run / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("1")
    return run


def test_merge_gives_the_trained_weights_with_forge_tokenizer_and_template(verl_run: Path) -> None:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    result = forge("model", "merge-verl", str(verl_run), "--json", timeout=900)
    assert result.returncode == 0, result.stderr
    merged = Path(json.loads(result.stdout)["path"])
    assert merged == verl_run / "checkpoints" / "global_step_1" / "hf"
    weights: dict[str, torch.Tensor] = {}
    for shard in merged.glob("*.safetensors"):
        weights.update(load_file(shard))
    expected = torch.load(verl_run / "expected.pt")
    tied = {k for k in expected if k not in weights}
    assert tied <= {"lm_head.weight"}, tied  # SmolLM2 ties its output projection to the embeddings
    # veRL's merger writes the dtype of the model's config (bfloat16 for the default model): the trained float32
    # weights rounded to it, exactly
    assert all(torch.equal(weights[k], expected[k].to(weights[k].dtype)) for k in weights)
    original = load_file(next(default_model_dir().glob("*.safetensors")))
    assert any(not torch.equal(weights[k].float(), original[k].float()) for k in weights if k in original), \
        "the merged weights are the trained ones, not the base model's"
    model_dir = default_model_dir()
    for name in ("chat_template.jinja", "tokenizer.json"):
        assert (merged / name).read_bytes() == (model_dir / name).read_bytes()
    # forge serves it as model=vllm model.path=DIR: a directory forge accepts and transformers loads
    from forge_cli.config.schema import VllmModel
    from forge_cli.serve.prepare import model_path

    assert model_path(VllmModel(source="vllm", description="merged", path=str(merged))) == merged.resolve()
    loaded = AutoModelForCausalLM.from_pretrained(merged, torch_dtype=torch.float32)
    embed = expected["model.embed_tokens.weight"]
    assert torch.equal(loaded.model.embed_tokens.weight, embed.to(torch.bfloat16).float())
    assert not any(p.name.endswith(".partial") for p in merged.parent.iterdir())


def test_bad_checkpoint_paths_exit_2(verl_run: Path, tmp_path: Path) -> None:
    for args, needle in ((["merge-verl", str(tmp_path)], "no veRL actor checkpoint"),
                         (["merge-verl", str(verl_run), "--step", "9"], "no checkpoint of step 9"),
                         (["merge-verl", str(tmp_path / "missing")], "no veRL actor checkpoint")):
        result = forge("model", *args)
        assert result.returncode == 2, result.stderr
        assert needle in result.stderr and "Traceback" not in result.stderr


@pytest.mark.e2e  # 3-7 min on 2 cores (a vLLM start on the merged weights and a react rollout): make test-e2e
@pytest.mark.requires("vllm")
def test_merged_checkpoint_is_served_and_evaluated_through_a_harness(verl_run: Path, tmp_path: Path) -> None:
    """The merged veRL checkpoint as ``model=vllm model.path=DIR``: forge's vLLM serves it and ``forge eval`` runs
    the react harness on it (one builtin test task), every model call answered by it through the capture proxy."""
    merged = verl_run / "checkpoints" / "global_step_1" / "hf"
    if not merged.is_dir():
        assert forge("model", "merge-verl", str(verl_run), timeout=900).returncode == 0
    result = forge("eval", "--json", "model=vllm", "model.device=cpu", f"model.path={merged}", "rollout.max_tasks=1",
                   "eval.trials=1",
                   "proxy.port=0", f"run.output_dir={tmp_path}", timeout=1500)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    run_dir = next(p for p in tmp_path.iterdir() if (p / "results.jsonl").is_file())
    rows = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["status"] == "ok" and rows[0]["reward"] in (0.0, 1.0), rows
    assert rows[0]["calls"] >= 1 and report
    served = yaml.safe_load((run_dir / "config.yaml").read_text())["model"]["path"]
    assert Path(served) == merged
