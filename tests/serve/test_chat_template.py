"""forge's chat template, rendered by transformers exactly as vLLM renders it (in the vLLM env)."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from forge_cli.paths import env_python
from forge_cli.serve.server import LOOPBACK, Launch, build_launch, cpu_has_native_bf16
from tests.requires import requires

RENDER = textwrap.dedent("""
    import json, sys
    from transformers import AutoTokenizer
    job = json.load(sys.stdin)
    tokenizer = AutoTokenizer.from_pretrained(job["dir"])
    print(json.dumps([tokenizer.apply_chat_template(case["messages"], tools=case.get("tools"), tokenize=False,
                                                    add_generation_prompt=True) for case in job["cases"]]))
""")
TOOL = {"type": "function", "function": {"name": "bash", "description": "Run a shell command.",
                                         "parameters": {"type": "object",
                                                        "properties": {"command": {"type": "string"}}}}}


TOOL_CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "Use the tools."},
    {"role": "user", "content": [{"type": "text", "text": "Run "}, {"type": "text", "text": "date"}]},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "bash", "arguments": '{"command": "date"}'}},
        {"id": "b", "type": "function", "function": {"name": "bash", "arguments": {"command": "pwd"}}}]},
    {"role": "tool", "tool_call_id": "a", "content": "Mon"},
    {"role": "tool", "tool_call_id": "b", "content": "/work"},
    {"role": "assistant", "content": "Done."},
    {"role": "user", "content": "Thanks"},
]


@pytest.fixture(scope="module")
def model_dir() -> Path:
    from forge_cli.serve import prepare_default_model

    requires("vllm")
    return prepare_default_model().path


@pytest.fixture(scope="module")
def rendered(model_dir: Path) -> list[str]:
    """Both conversations rendered in one subprocess (importing transformers is the slow part)."""
    cases = [{"messages": [{"role": "user", "content": "Hi"}]}, {"messages": TOOL_CONVERSATION, "tools": [TOOL]}]
    job = json.dumps({"dir": str(model_dir), "cases": cases})
    proc = subprocess.run([str(env_python("vllm")), "-c", RENDER], input=job, capture_output=True, text=True,
                          timeout=600, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return list(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_plain_chat_is_smollm2s_chatml(rendered: list[str]) -> None:
    text = rendered[0]
    assert text == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                    "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def test_tools_calls_and_results_in_hermes_format(rendered: list[str]) -> None:
    text = rendered[1]
    assert text.startswith("<|im_start|>system\nUse the tools.\n\n# Tools\n")
    assert "<tools>\n" + json.dumps(TOOL["function"]) + "\n</tools>" in text
    assert "<|im_start|>user\nRun date<|im_end|>\n" in text
    assert ('<|im_start|>assistant\n<tool_call>\n{"name": "bash", "arguments": {"command": "date"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "bash", "arguments": {"command": "pwd"}}\n</tool_call><|im_end|>\n') in text
    # consecutive tool results share one user turn
    assert ("<|im_start|>user\n<tool_response>\nMon\n</tool_response>\n<tool_response>\n/work\n</tool_response>"
            "<|im_end|>\n<|im_start|>assistant\nDone.<|im_end|>\n") in text
    assert text.endswith("<|im_start|>user\nThanks<|im_end|>\n<|im_start|>assistant\n")


def test_launch_flags_for_the_default_model(model_dir: Path) -> None:
    from forge_cli.config.compose import compose
    from forge_cli.config.schema import SmolModel
    from forge_cli.serve import resolve_model

    model = compose(["model.kv_cache_gb=1.5", "model.max_model_len=16384"]).experiment.model
    assert isinstance(model, SmolModel)
    launch: Launch = build_launch(model, resolve_model(model), 8123)
    argv = launch.argv
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--host") + 1] == LOOPBACK and argv[argv.index("--port") + 1] == "8123"
    expected_dtype = "bfloat16" if cpu_has_native_bf16() else "float32"  # dtype: auto on CPU
    assert "--enforce-eager" in argv and argv[argv.index("--dtype") + 1] == expected_dtype
    assert argv[argv.index("--tool-call-parser") + 1] == "hermes" and "--enable-auto-tool-choice" in argv
    assert argv[argv.index("--chat-template") + 1] == str(model_dir / "chat_template.jinja")
    assert launch.env["VLLM_CPU_KVCACHE_SPACE"] == "2"  # whole GiB, rounded up
    assert launch.env["VLLM_SERVER_DEV_MODE"] == "1" and launch.env["HF_HUB_OFFLINE"] == "1"
    # 16384 > SmolLM2's 8192: served with YaRN RoPE scaling, not by forcing vLLM past its rotary cache
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN" not in launch.env
    rope = json.loads(argv[argv.index("--hf-overrides") + 1])["rope_parameters"]
    assert rope["rope_type"] == "yarn" and rope["factor"] == 2.0
    assert int(launch.env["VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"]) >= 1800
