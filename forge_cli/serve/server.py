"""Start, health-check and stop vLLM's OpenAI-compatible server for a model config.

The server runs as ``<vllm env>/bin/python -m vllm.entrypoints.openai.api_server`` in its own
process group (so stopping it takes vLLM's engine and worker processes with it), bound to
127.0.0.1, with its output in a log file. vLLM's RL endpoints (``/pause``, ``/resume``,
``/collective_rpc``, ``/update_weight_version``, ``/weight_info``) are enabled with
``VLLM_SERVER_DEV_MODE=1``: :mod:`forge_cli.serve.weights` needs them.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from forge_cli.config.schema import LoraSettings, ModelConfig, OpenAICompatibleModel, SmolModel, VllmModel
from forge_cli.errors import UserError
from forge_cli.paths import forge_home
from forge_cli.ports import bindable, free_port
from forge_cli.procs import die_with_parent
from forge_cli.serve.adapter import AdapterServing, adapter_config, identity_adapter, lora_launch
from forge_cli.serve.prepare import PreparedModel, check_model, resolve_model, vllm_python

LOOPBACK = "127.0.0.1"
Log = Callable[[str], None]


class ServerError(UserError):
    """vLLM did not come up (bad model directory, out of memory, ...): the log tail says why."""


def check_port_free(host: str, port: int) -> None:
    """Raise a UserError if vLLM could not listen on ``host:port`` (checked as it binds: :mod:`forge_cli.ports`)."""
    try:
        free = bindable(host, port)
    except socket.gaierror as exc:
        raise UserError(f"cannot listen on {host}: {exc.strerror}", fix="use an address of this machine, e.g. "
                        "127.0.0.1", exit_code=2) from None
    if not free:
        raise UserError(f"port {port} on {host} is already in use",
                        fix="pick another with --port P (or model.port=P), or 0 for a free one", exit_code=2)


def logs_dir() -> Path:
    return forge_home() / "logs"


def state_dir() -> Path:
    """Where detached servers leave ``serve-<port>.json`` (pid, url, log) for ``forge serve --stop``."""
    return forge_home() / "run"


@dataclass(frozen=True)
class Launch:
    """Everything needed to start one vLLM server: argv, extra environment, where it listens."""

    argv: list[str]
    env: dict[str, str]
    host: str
    port: int
    served_name: str
    model_path: Path


def build_launch(model: SmolModel | VllmModel, prepared: PreparedModel, port: int,
                 model_path: Path | None = None, adapter: AdapterServing | None = None) -> Launch:
    """The vLLM command line and environment for ``model`` (``model_path`` overrides the weights).

    With ``adapter`` (or a LoRA checkpoint as the model) the base is served as ``<served_name>-base`` and the
    adapter as ``served_name`` (``forge_cli/serve/adapter.py``)."""
    path = model_path or prepared.weights
    if adapter is None and prepared.base is not None:
        adapter = AdapterServing(prepared.path, int(adapter_config(prepared.path)["r"]))
    argv = [str(vllm_python()), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(path), "--tokenizer", str(prepared.weights)]
    argv += ["--served-model-name", model.served_name] if adapter is None else []
    argv += ["--host", model.host, "--port", str(port), "--dtype", serving_dtype(model),
             "--max-model-len", str(model.max_model_len)]
    env = {"VLLM_SERVER_DEV_MODE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "TOKENIZERS_PARALLELISM": "false"}
    if adapter is not None:
        lora_argv, lora_env = lora_launch(model.served_name, adapter)
        argv += lora_argv
        env.update(lora_env)
    if model.device == "cpu":
        argv.append("--enforce-eager")
        # vLLM reads VLLM_CPU_KVCACHE_SPACE as whole GiB
        env["VLLM_CPU_KVCACHE_SPACE"] = str(max(1, math.ceil(model.kv_cache_gb)))
        # one engine step prefilling a long harness prompt (Qwen Code: ~17,000 tokens) on a few busy CPU cores can
        # outlast vLLM's 300 s default; the engine then shuts down instead of answering
        env["VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"] = "3600"
    if model.tool_call_parser:
        argv += ["--enable-auto-tool-choice", "--tool-call-parser", model.tool_call_parser]
    if prepared.chat_template is not None:
        argv += ["--chat-template", str(prepared.chat_template)]
    argv += context_extension_args(model, prepared.weights)
    argv += list(model.extra_args)
    return Launch(argv, env, model.host, port, model.served_name, path)


def cpu_has_native_bf16() -> bool:
    """Does this CPU compute bf16 natively (AVX512-BF16 or AMX)? On AVX2-only CPUs bf16 is emulated."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def gpu_visible() -> bool:
    """Whether a CUDA (NVIDIA) or ROCm (AMD) device node is visible to this process."""
    dev = Path("/dev")
    return any(dev.glob("nvidia[0-9]*")) or (dev / "kfd").exists()


def serving_dtype(model: SmolModel | VllmModel) -> str:
    """``model.dtype``, with ``auto`` on CPU resolved to float32 unless the CPU has native bf16.

    Measured here (AVX2 only): bf16 matmuls ~30x slower than float32; vLLM's own ``auto`` would keep
    the checkpoint's bf16. On GPUs ``auto`` is left to vLLM.
    """
    if model.dtype != "auto" or model.device != "cpu":
        return model.dtype
    return "bfloat16" if cpu_has_native_bf16() else "float32"


def _model_config(path: Path) -> dict[str, Any]:
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def context_extension_args(model: SmolModel | VllmModel, path: Path) -> list[str]:
    """vLLM's ``--hf-overrides`` for ``context_extension`` (none when the native context suffices)."""
    overrides = context_extension(model, path)
    return ["--hf-overrides", json.dumps(overrides)] if overrides else []


def context_extension(model: SmolModel | VllmModel, path: Path) -> dict[str, Any] | None:
    """The model-config overrides that serve ``model.max_model_len`` past the checkpoint's native context (``None``
    within it); forge's server passes them as vLLM's ``--hf-overrides``, veRL's replicas as its engine kwargs.

    vLLM sizes its rotary-embedding cache by the checkpoint's ``max_position_embeddings``; forcing a longer
    ``--max-model-len`` past it (VLLM_ALLOW_LONG_MAX_MODEL_LEN) read past that cache here: SmolLM2 served at
    32,768 tokens returned null logprobs for prompts over 8,192. YaRN RoPE scaling with factor
    ``max_model_len / native`` makes every position valid; ``context_extension: none`` refuses instead.
    """
    config = _model_config(path)
    native = int(config.get("max_position_embeddings") or 0)
    if not native or model.max_model_len <= native:
        return None
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if model.context_extension == "none" or rope.get("rope_type", "default") not in ("default", "yarn"):
        why = ("context_extension is none" if model.context_extension == "none"
               else f"its RoPE type {rope.get('rope_type')!r} cannot be extended with YaRN by forge")
        raise UserError(f"max_model_len {model.max_model_len} exceeds the model's native context of {native} "
                        f"tokens and {why}",
                        fix=f"set model.max_model_len<={native}, or model.context_extension=yarn")
    theta = rope.get("rope_theta", config.get("rope_theta", 10000.0))
    # attention_factor 1: YaRN's default attention temperature (0.1 ln(factor) + 1) suits models fine-tuned with YaRN;
    # on an untuned checkpoint it changes every answer (SmolLM2's greedy "The capital of France is Paris." became
    # "...a classic example of a rhetorical device"); without it only the low-frequency dimensions are interpolated,
    # which barely turn within a short prompt, so short prompts answer as at the native context
    parameters = {"rope_type": "yarn", "rope_theta": theta, "factor": model.max_model_len / native,
                  "original_max_position_embeddings": native, "attention_factor": 1.0}
    # as transformers' YaRN expects: max_position_embeddings is the scaled length, the native one is "original"
    return {"max_position_embeddings": model.max_model_len, "rope_parameters": parameters}


@dataclass
class PolicyServer:
    """A running vLLM server: ``url`` (no ``/v1``), ``base_url`` (with it), ``model`` (served name)."""

    launch: Launch
    process: subprocess.Popen[bytes]
    log_path: Path
    prepared: PreparedModel
    started_s: float = 0.0
    ready_s: float | None = None
    _stopped: bool = field(default=False, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.launch.host}:{self.launch.port}"

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    @property
    def model(self) -> str:
        return self.launch.served_name

    @property
    def port(self) -> int:
        return self.launch.port

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def healthy(self, timeout: float = 2.0) -> bool:
        """Is the server up and answering ``/health`` with 200?"""
        return health(self.url, timeout)

    def wait_ready(self, timeout: float = 600.0, log: Log | None = None) -> float:
        """Block until ``/health`` answers (returns seconds since start) or raise ServerError."""
        say = log or (lambda _msg: None)
        deadline = time.monotonic() + timeout
        last_note = 0.0
        while time.monotonic() < deadline:
            if not self.alive():
                raise ServerError(f"vLLM exited during start-up (exit status {self.process.returncode}):\n"
                                  f"{log_tail(self.log_path)}", fix=f"full log: {self.log_path}")
            if self.healthy(timeout=1.0):
                self.ready_s = time.monotonic() - self.started_s
                return self.ready_s
            elapsed = time.monotonic() - self.started_s
            if elapsed - last_note >= 10:
                last_note = elapsed
                say(f"waiting for vLLM ({elapsed:.0f} s): {_progress(self.log_path)}")
            time.sleep(0.5)
        self.stop()
        raise ServerError(f"vLLM did not become healthy within {timeout:.0f} s:\n{log_tail(self.log_path)}",
                          fix=f"full log: {self.log_path}")

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the whole process group, then SIGKILL what is left after ``timeout``."""
        if self._stopped:
            return
        self._stopped = True
        stop_group(self.process.pid, timeout, self.process)

    def __enter__(self) -> PolicyServer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def stop_group(pgid: int, timeout: float = 30.0, process: subprocess.Popen[bytes] | None = None) -> None:
    """Terminate process group ``pgid`` (the server and its children), escalating to SIGKILL."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None:
            process.poll()
        if not _group_alive(pgid):
            break
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    if process is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # zombies of the group leader still count for killpg: look for a live member
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


def health(url: str, timeout: float = 2.0) -> bool:
    """GET ``url``/health → True on 200, False on anything else (refused, timeout, 5xx)."""
    import httpx

    try:
        return httpx.get(url.rstrip("/") + "/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def log_tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    interesting = [line for line in text if "Error" in line or "error" in line]
    tail = text[-lines:]
    extra = [line for line in interesting[-5:] if line not in tail]
    return "\n".join(["  " + line for line in extra + tail])


def _progress(path: Path) -> str:
    """A short phrase for what vLLM is doing, from its latest log line."""
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "starting"
    logged = [line for line in lines if " INFO " in line and "]" in line]
    if not logged:
        return "starting"
    message = logged[-1].split("]", 1)[1].strip()
    return message[:100] or "starting"


def start_server(model: ModelConfig, port: int | None = None, *, log_path: Path | None = None,
                 wait: bool = True, timeout: float = 600.0, detach: bool = False, log: Log | None = None,
                 model_path: Path | None = None, lora: LoraSettings | None = None) -> PolicyServer:
    """Start vLLM for ``model`` in the background and (``wait``) block until it is healthy.

    ``port``: None → ``model.port``; 0 → a free port. The default model is converted first if
    needed. Unless ``detach``, the server is stopped when this Python process exits (even when it
    is killed). ``model_path`` serves other weights (a checkpoint) with the model's tokenizer.
    ``lora`` (``trainer.lora`` of a training run) serves an adapter of that rank under the model's name, starting
    from the identity adapter (or the model's own adapter when ``model.path`` is a LoRA checkpoint), that
    :func:`forge_cli.serve.weights.update_weights` replaces at run time.
    """
    if isinstance(model, OpenAICompatibleModel):
        raise UserError(f"model source 'openai-compatible' is an external endpoint ({model.base_url}); "
                        "forge does not start a server for it", fix="use model=smollm2-135m or model=vllm",
                        exit_code=2)
    if model.host != LOOPBACK:
        raise UserError(f"model.host={model.host}: forge binds its policy servers to {LOOPBACK} only",
                        fix=f"set model.host={LOOPBACK}", exit_code=2)
    check_model(model)
    if model.device == "gpu" and not gpu_visible():
        # vLLM would fall back to its CPU platform without forge's CPU settings (eager mode, KV cache size) and
        # spend its first request compiling: it looks hung (seen with model=vllm, whose default device is gpu)
        raise UserError("model.device=gpu but this machine shows no GPU (no /dev/nvidia*, /dev/kfd)",
                        fix="serve on the CPU: model.device=cpu (small models only), or run on a GPU machine",
                        exit_code=2)
    chosen = model.port if port is None else port
    if chosen == 0:
        chosen = free_port(model.host)
    else:
        check_port_free(model.host, chosen)
    prepared = resolve_model(model, log=log)
    if model_path is not None and not (Path(model_path) / "config.json").is_file():
        raise UserError(f"{model_path} is not a Hugging Face model directory (no config.json in it)")
    adapter = None
    if lora is not None and model_path is None:
        own = int(adapter_config(prepared.path)["r"]) if prepared.base is not None else 0
        start = prepared.path if prepared.base is not None else identity_adapter(
            prepared.weights, lora.rank, lora.alpha, lora.target_modules)
        adapter = AdapterServing(start, max(lora.rank, own))
    launch = build_launch(model, prepared, chosen, Path(model_path) if model_path else None, adapter)
    return spawn(launch, prepared, log_path=log_path, wait=wait, timeout=timeout, detach=detach, log=log)


def spawn(launch: Launch, prepared: PreparedModel, *, log_path: Path | None = None, wait: bool = True,
          timeout: float = 600.0, detach: bool = False, log: Log | None = None) -> PolicyServer:
    """Run ``launch`` in a new process group with output to ``log_path``; optionally wait for health."""
    if log_path is None:
        logs_dir().mkdir(parents=True, exist_ok=True)
        log_path = logs_dir() / f"vllm-{launch.port}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **launch.env}
    with log_path.open("wb") as out:
        process = subprocess.Popen(launch.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                   env=env, start_new_session=True,
                                   preexec_fn=None if detach else die_with_parent())
    server = PolicyServer(launch, process, log_path, prepared, started_s=time.monotonic())
    if not detach:
        atexit.register(server.stop)
    if wait:
        try:
            server.wait_ready(timeout, log=log)
        except BaseException:
            server.stop()
            raise
    return server


def restart(server: PolicyServer, model_path: Path | None = None, timeout: float = 600.0,
            log: Log | None = None) -> PolicyServer:
    """Stop ``server`` and start the same launch again on the same port (optionally other weights)."""
    server.stop()
    launch = server.launch
    if model_path is not None:
        argv = list(launch.argv)
        argv[argv.index("--model") + 1] = str(model_path)
        launch = Launch(argv, launch.env, launch.host, launch.port, launch.served_name, Path(model_path))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the old socket may linger for a moment
        try:
            check_port_free(launch.host, launch.port)
            break
        except UserError:
            time.sleep(0.2)
    return spawn(launch, server.prepared, log_path=server.log_path, timeout=timeout, log=log)
