"""Make a running vLLM server serve new weights from a Hugging Face checkpoint directory.

In place, with vLLM's own RL endpoints (enabled by ``VLLM_SERVER_DEV_MODE=1``, which
:func:`forge_cli.serve.server.start_server` sets); this works on the CPU build:

1. ``POST /pause?mode=wait`` - the scheduler stops admitting requests and waits until the
   requests in flight have finished, on the old weights;
2. ``POST /collective_rpc {"method": "reload_weights", "kwargs": {"weights_path": DIR}}`` - every
   worker loads ``DIR``'s safetensors into the model in place (same architecture and shapes);
3. ``POST /reset_prefix_cache`` - no KV computed by the old weights is reused;
4. ``POST /update_weight_version {"new_version": V}`` - ``GET /weight_info`` reports ``V`` from now on;
5. ``POST /resume`` - always, also when a step failed.

What a request sees: one already generating when the update starts finishes normally, entirely on
the old weights (``/pause`` waits for it); one that arrives during the update is held, not
refused, and runs on the new weights after ``/resume``. Nothing is aborted, so no request is lost;
the cost is that an update waits for the longest generation in flight. (vLLM's
``/update_weights`` endpoint needs an NCCL/IPC weight-transfer engine, i.e. GPUs, so checkpoints
from disk go through ``reload_weights``.) ``mode="restart"`` instead restarts the server on the
checkpoint: requests in flight then fail with a connection error and the URL is down meanwhile.

A LoRA checkpoint (``trainer.lora``: PEFT adapter files, no ``config.json``) takes step 2 as
``POST /v1/load_lora_adapter {"lora_name": NAME, "lora_path": DIR, "load_inplace": true}`` when the
server serves a LoRA adapter (a server forge started for LoRA: ``forge_cli/serve/adapter.py``; the
adapter named NAME is replaced in place, ~0.1 s here). A server that serves no adapter gets the adapter merged
into the base's full weights (peft ``merge_and_unload``, written to a temporary directory beside the checkpoint
and removed after) through ``reload_weights``; that needs forge's ``train`` extra (torch, peft).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Literal

from forge_cli.errors import UserError
from forge_cli.serve.adapter import ADAPTER_WEIGHTS, is_adapter_dir, merge_adapter
from forge_cli.serve.server import PolicyServer, restart

UpdateMode = Literal["wait", "restart"]


class WeightUpdateError(RuntimeError):
    """The server refused or failed a step of the update (its answer is in the message)."""


def _url(server: PolicyServer | str) -> str:
    return server.url if isinstance(server, PolicyServer) else server.rstrip("/").removesuffix("/v1")


def weight_version(server: PolicyServer | str, timeout: float = 10.0) -> str:
    """The weight version the server reports (``GET /weight_info``; ``"default"`` before any update)."""
    import httpx

    response = httpx.get(_url(server) + "/weight_info", timeout=timeout)
    if response.status_code == 404:
        raise WeightUpdateError(f"{_url(server)} has no /weight_info: start vLLM with VLLM_SERVER_DEV_MODE=1")
    response.raise_for_status()
    return str(response.json()["weight_version"])


def check_checkpoint(checkpoint_dir: Path | str) -> Path:
    """A directory with config.json and *.safetensors, or a LoRA adapter checkpoint, else a UserError."""
    path = Path(checkpoint_dir).expanduser().resolve()
    if not path.is_dir():
        raise UserError(f"checkpoint {checkpoint_dir}: no such directory")
    if is_adapter_dir(path):
        if not (path / ADAPTER_WEIGHTS).is_file():
            raise UserError(f"LoRA checkpoint {checkpoint_dir} has no {ADAPTER_WEIGHTS}")
        return path
    if not (path / "config.json").is_file() or not any(path.glob("*.safetensors")):
        raise UserError(f"checkpoint {checkpoint_dir} is not a Hugging Face model directory "
                        "(needs config.json and *.safetensors)")
    return path


def _next_version(current: str) -> str:
    return str(int(current) + 1) if current.isdigit() else "1"


def update_weights(server: PolicyServer | str, checkpoint_dir: Path | str, version: str | None = None, *,
                   mode: UpdateMode = "wait", timeout: float = 600.0) -> str:
    """Serve the weights in ``checkpoint_dir`` from now on; return the new weight version.

    ``version`` defaults to the server's current version + 1 ("1" after "default"). ``mode="wait"``
    reloads in place (see the module docstring for what in-flight requests see); ``"restart"``
    needs a :class:`PolicyServer` this process started, and restarts it on the checkpoint.
    """
    path = check_checkpoint(checkpoint_dir)
    url = _url(server)
    new_version = version or _next_version(weight_version(url))
    if is_adapter_dir(path):
        if mode == "restart":
            raise UserError("a restart-mode weight update takes a full checkpoint, not a LoRA adapter",
                            fix="update in place (mode='wait'): the adapter is loaded at run time", exit_code=2)
        name = served_adapter(url)
        if name is None:
            with tempfile.TemporaryDirectory(prefix=f".{path.name}.merged-", dir=path.parent) as merged:
                _merge(path, Path(merged))
                _reload(url, {"method": "reload_weights", "kwargs": {"weights_path": merged}}, new_version,
                        timeout)
        else:
            _reload(url, None, new_version, timeout, lora={"lora_name": name, "lora_path": str(path),
                                                           "load_inplace": True})
        return new_version
    if mode == "restart":
        if not isinstance(server, PolicyServer):
            raise UserError("a restart-mode weight update needs the PolicyServer object that started the server")
        restarted = restart(server, model_path=path, timeout=timeout)
        server.process, server.launch, server.started_s = restarted.process, restarted.launch, restarted.started_s
        server.ready_s, server._stopped = restarted.ready_s, False
        _post(url, "/update_weight_version", {"new_version": new_version}, timeout)
        return new_version
    _reload(url, {"method": "reload_weights", "kwargs": {"weights_path": str(path)}}, new_version, timeout)
    return new_version


def _reload(url: str, rpc: dict[str, object] | None, version: str, timeout: float,
            lora: dict[str, object] | None = None) -> None:
    """Pause, reload (a collective RPC or a LoRA adapter), drop the prefix cache, stamp the version, resume."""
    _post(url, "/pause", None, timeout, params={"mode": "wait"})
    try:
        if rpc is not None:
            _post(url, "/collective_rpc", rpc, timeout)
        if lora is not None:
            _post(url, "/v1/load_lora_adapter", lora, timeout)
        _post(url, "/reset_prefix_cache", None, timeout)
        _post(url, "/update_weight_version", {"new_version": version}, timeout)
    finally:
        _post(url, "/resume", None, timeout)


def served_adapter(server: PolicyServer | str, timeout: float = 10.0) -> str | None:
    """The name of the LoRA adapter the server serves (``/v1/models`` entries with a parent), None if it serves
    none; a WeightUpdateError if it serves several (forge cannot tell which one is the policy)."""
    import httpx

    url = _url(server)
    try:
        cards = httpx.get(url + "/v1/models", timeout=timeout).json()["data"]
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        raise WeightUpdateError(f"GET {url}/v1/models failed: {exc!r}") from exc
    adapters = [str(card["id"]) for card in cards if card.get("parent")]
    if len(adapters) > 1:
        raise WeightUpdateError(f"{url} serves several LoRA adapters ({', '.join(adapters)}): forge replaces the "
                                "one it serves as the policy, so serve only that one")
    return adapters[0] if adapters else None


def _merge(adapter: Path, out: Path) -> None:
    try:
        merge_adapter(adapter, out)
    except ModuleNotFoundError as exc:
        raise UserError(f"serving LoRA checkpoint {adapter} on a server without LoRA merges it into full weights, "
                        f"which needs torch and peft ({exc.name} is missing)",
                        fix="pip install 'forge[train]', or serve the adapter: a server forge starts for "
                            "trainer.lora (or model.path=ADAPTER) loads it at run time", exit_code=2) from None


def _post(url: str, path: str, body: dict[str, object] | None, timeout: float,
          params: dict[str, str] | None = None) -> object:
    import httpx

    started = time.monotonic()
    try:
        response = httpx.post(url + path, json=body, params=params, timeout=timeout)
    except httpx.HTTPError as exc:
        raise WeightUpdateError(f"POST {url}{path} failed: {exc!r}") from exc
    if response.status_code == 404:
        needs = ("VLLM_ALLOW_RUNTIME_LORA_UPDATING=True" if path == "/v1/load_lora_adapter"
                 else "VLLM_SERVER_DEV_MODE=1")
        raise WeightUpdateError(f"{url}{path} not found: the server must run with {needs} "
                                f"(forge's start_server sets it); it answered {response.text[:300]}")
    if response.status_code >= 400:
        raise WeightUpdateError(f"POST {url}{path} → {response.status_code} after "
                                f"{time.monotonic() - started:.1f} s: {response.text[:500]}")
    if not response.content:
        return None
    # /v1/load_lora_adapter answers in plain text ("Success: LoRA adapter ... added successfully.")
    return response.json() if response.headers.get("content-type", "").startswith("application/json") \
        else response.text
