"""`forge train` refuses bad input before anything starts: one message, exit 2, no traceback, nothing written.

The group size has one key (algo.group_size; rollout.samples_per_task follows it); a harness whose own first
prompt cannot fit a model.max_model_len the user set is refused (forge rollout and forge eval too) unless
model.auto_context=true is given as well (on the defaults the context is raised); a checkpoint of another model
is refused on --resume, naming both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from forge_cli.config.compose import compose
from tests.helpers import forge

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 49152, "hidden_size": 576,
         "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "intermediate_size": 1536}
QWEN = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896,
        "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2, "intermediate_size": 4864}


def _refused(result: object, *needles: str) -> None:
    assert result.returncode == 2, result.stderr  # type: ignore[attr-defined]
    stderr = result.stderr  # type: ignore[attr-defined]
    assert "Traceback" not in stderr and stderr.count("error:") == 1, stderr
    for needle in needles:
        assert needle in stderr, (needle, stderr)


@pytest.mark.parametrize(("args", "needles"), [
    (["algo.group_size=1"], ["group_size 1", "set algo.group_size to 2 or more"]),
    (["algo.no_such_option=3"], ["no_such_option"]),
    (["trainer.no_such_option=3"], ["no_such_option"]),
    (["trainer.learning_rate=abc"], ["learning_rate"]),
    (["algo.over_length=truncate"], ["over_length"]),
    (["rollout.samples_per_task=2"], ["rollout.samples_per_task=2 conflicts with algo.group_size=4",
                                      "fix: give one of them: algo.group_size=2"]),
    (["algo=dapo", "model.max_output_tokens=16"], ["algo.overlong_buffer_tokens=32 does not fit",
                                                    "algo.overlong_buffer_tokens=3 "]),
    (["+harness=gemini-cli", "model.max_model_len=8192"], ["gemini-cli's own first prompt is ~11500 tokens",
                                                           "a context of 11660", "model.max_model_len=12288",
                                                           "model.auto_context=true"]),
])
@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
def test_bad_input_is_one_message_exit_2(tmp_path: Path, args: list[str], needles: list[str], dry_run: bool) -> None:
    result = forge("train", *(["--dry-run"] if dry_run else []), *args, f"run.output_dir={tmp_path}")
    _refused(result, *needles)
    assert not any(tmp_path.iterdir()), "nothing written"


def test_the_group_size_is_one_key(tmp_path: Path) -> None:
    for args, size in ((["algo.group_size=6"], 6), (["algo.group_size=3", "rollout.samples_per_task=3"], 3),
                       (["algo=dapo"], 8)):
        result = forge("train", "--dry-run", "--json", *args, f"run.output_dir={tmp_path}")
        assert result.returncode == 0, result.stderr
        plan = json.loads(result.stdout)
        assert plan["samples_per_task"] == size and f"x {size} rollouts" in plan["train"]


@pytest.mark.parametrize("command", ["rollout", "eval", "train"])
def test_a_harness_prompt_that_cannot_fit_is_refused_by_every_command(tmp_path: Path, command: str) -> None:
    for dry_run in (["--dry-run"], []):
        result = forge(command, *dry_run, "+harness=openclaw", "model.max_model_len=8192", f"run.output_dir={tmp_path}")
        _refused(result, "openclaw's own first prompt is ~9000 tokens", "model.max_model_len=9216",
                 "model.auto_context=true")
    assert not any(tmp_path.iterdir())
    # on the defaults (model.auto_context: true) the context is raised to fit, and the plan says so
    for auto in ([], ["model.max_model_len=8192", "model.auto_context=true"]):
        result = forge(command, "--dry-run", "+harness=openclaw", *auto, f"run.output_dir={tmp_path}")
        assert result.returncode == 0, result.stderr
        assert "model.auto_context: serving max_model_len=9216 instead of 8192" in result.stdout
        assert "contextWindow: 9216" in result.stdout
    # only where forge serves the model: an API endpoint's context is what it is (forge train refuses an endpoint
    # it cannot update first, tests/train/test_train_cli.py)
    if command == "train":
        return
    result = forge(command, "--dry-run", "+harness=openclaw", "model=openai-compatible", "model.max_model_len=8192",
                   "model.max_output_tokens=160",
                   "model.base_url=http://127.0.0.1:9/v1", "model.model=x", f"run.output_dir={tmp_path}")
    _refused(result, "if the endpoint serves that much context, say so: model.max_model_len=9216")
    _refused(forge(command, "--dry-run", "model=openai-compatible", "model.auto_context=true",
                   "model.base_url=http://127.0.0.1:9/v1", "model.model=x"), "auto_context")


def _run_dir(tmp_path: Path, checkpoint_config: dict[str, object]) -> Path:
    """A run directory of the experiment on a model directory with LLAMA's config, whose step-1 checkpoint has
    ``checkpoint_config``."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(LLAMA))
    run = tmp_path / "runs" / "forge-run-20260101-000000-abcd"
    ckpt = run / "checkpoints" / "step-1"
    ckpt.mkdir(parents=True)
    data = compose(["model=vllm", f"model.path={model}", f"run.output_dir={tmp_path / 'runs'}"]).experiment
    (run / "config.yaml").write_text(yaml.safe_dump(data.model_dump(mode="json"), sort_keys=False))
    (ckpt / "config.json").write_text(json.dumps(checkpoint_config))
    (ckpt / "trainer_state.pt").write_bytes(b"")
    (ckpt / "metrics.json").write_text(json.dumps({"step": 1}) + "\n")
    return run


def test_resume_with_a_checkpoint_of_another_model_is_refused(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, QWEN)
    for dry_run in (["--dry-run"], []):
        result = forge("train", "--resume", str(run), *dry_run)
        _refused(result, f"checkpoint {run / 'checkpoints' / 'step-1'} is a Qwen2ForCausalLM (qwen2; vocab 151936, "
                         f"hidden 896, 24 layers, 14 heads)",
                 f"model.path={tmp_path / 'model'} is a LlamaForCausalLM (llama; vocab 49152, hidden 576, 30 layers, "
                 f"9 heads)", "they differ in model_type, architectures, vocab_size, hidden_size")
    assert sorted(p.name for p in run.iterdir()) == ["checkpoints", "config.yaml"], "nothing started"


def test_resume_with_a_checkpoint_of_the_same_model_plans(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, {**LLAMA, "max_position_embeddings": 32768, "torch_dtype": "float32"})
    result = forge("train", "--resume", str(run), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "train: 10 steps x 4 tasks x 4 rollouts" in result.stdout


@pytest.mark.parametrize("command", ["eval", "train", "rollout"])
def test_a_model_path_that_does_not_exist_is_refused_by_the_dry_run(command: str, tmp_path: Path) -> None:
    for path, needle in ((tmp_path / "nope", "no such directory"), (tmp_path, "no config.json")):
        done = forge(command, "--dry-run", f"model.path={path}")
        assert done.returncode == 2 and needle in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_sampling_seed_on_a_cpu_policy_server_is_refused() -> None:
    done = forge("rollout", "--dry-run", "rollout.sampling.seed=3")
    assert done.returncode == 2 and "CPU Generator does not use offset" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_the_missions_example_plans_on_the_defaults(tmp_path: Path) -> None:
    """`forge train +harness=openclaw +env=osworld --dry-run`: exit 0, the context it chose and its prefill cost."""
    result = forge("train", "--dry-run", "+harness=openclaw", "+env=osworld", f"run.output_dir={tmp_path}")
    assert result.returncode == 0, result.stderr
    out = " ".join(result.stdout.split())
    assert "serving max_model_len=9216 instead of 8192" in out and "prefill" in out, out[:2000]
    assert not any(tmp_path.iterdir()), "a dry run writes nothing"
