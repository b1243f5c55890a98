"""What exactly a run was: ``manifest.json`` in every run directory.

Written when a run directory is made (``RolloutSession``: forge rollout, eval and train; ``forge train
trainer=verl``), beside ``config.yaml`` (the composed experiment). It records:

- ``forge``: its version and, in a git checkout, the revision and whether the tree had uncommitted changes;
- ``python``: the interpreter's version;
- ``machine``: the CPU (model, the cores this process may use, whether it computes bf16 natively: without
  AVX512-BF16 or AMX, vLLM on CPU serves float32 and the trainer is several times slower), the memory, and the GPUs
  ``nvidia-smi -L`` lists (none: an empty list): runs on two kinds of machine are not timed or served alike;
- ``environments``: each environment the run uses (forge's own, vLLM's when forge serves the policy, mitmproxy's
  for the proxy, veRL's for ``trainer=verl``) as the SHA-256 of its installed distributions (``name==version``,
  sorted) and their count: a lock of what ran, read from the environment's ``*.dist-info`` directories;
- ``harness``: name, package and pinned version, and the SHA-256 of its committed fingerprint
  (``configs/harness/<name>.fingerprint.json``, ``forge harness check``; None: none committed);
- ``model``: where the policy came from and the SHA-256 of its weights' content (from the converted model's own
  manifest of file hashes, else of its files, cached by path, size and modification time);
- ``seeds``: ``run.seed`` and ``rollout.sampling.seed``;
- ``config_sha256``: of the composed experiment.

``differences`` lists what two manifests disagree on; ``forge eval --compare`` and ``--resume`` print it as a
warning (two runs that differ in any of it do not measure the same thing).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forge_cli.errors import UserError
from forge_cli.harness.bundles import known_harnesses
from forge_cli.harness.fingerprint_diff import fingerprint_path
from forge_cli.paths import env_dir, forge_home

if TYPE_CHECKING:
    from forge_cli.config.schema import Experiment

MANIFEST = "manifest.json"
REPO = Path(__file__).resolve().parents[2]


def _forge() -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        out: dict[str, Any] = {"version": version("forge-rl")}
    except PackageNotFoundError:
        out = {"version": None}
    if (REPO / ".git").exists():
        try:
            rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                                 timeout=10, check=False).stdout.strip()
            dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=30, check=False).stdout.strip()
            out["git"] = {"revision": rev or None, "dirty": bool(dirty)}
        except (OSError, subprocess.TimeoutExpired):
            out["git"] = None
    return out


def _cpuinfo(path: Path = Path("/proc/cpuinfo")) -> tuple[str | None, set[str]]:
    """The CPU's model name and flags (Linux; elsewhere: None and none)."""
    model: str | None = None
    flags: set[str] = set()
    try:
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model is None:
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    return model, flags


def _gpus() -> list[str]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    # "GPU 0: NVIDIA H100 80GB HBM3 (UUID: ...)": the model, without the per-device UUID
    return [line.split(":", 1)[1].split("(UUID")[0].strip() for line in out.splitlines() if ":" in line]


def machine() -> dict[str, Any]:
    """What the run's processes ran on (see the module docstring)."""
    model, flags = _cpuinfo()
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        memory: float | None = round(pages / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        memory = None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": model, "cores": cores, "bf16": bool(flags & {"avx512_bf16", "amx_bf16"}), "memory_gib": memory,
            "gpus": _gpus()}


def environment_lock(prefix: Path) -> dict[str, Any] | None:
    """The distributions installed in the environment at ``prefix`` as a hash and a count (None: no environment)."""
    sites = sorted(prefix.glob("lib/python3*/site-packages"))
    if not sites:
        return None
    names = sorted(p.name.removesuffix(".dist-info").replace("_", "-").lower()
                   for site in sites for p in site.glob("*.dist-info"))
    return {"sha256": hashlib.sha256("\n".join(names).encode()).hexdigest(), "packages": len(names)}


def _environments(exp: Experiment) -> dict[str, Any]:
    envs: dict[str, Any] = {"forge": environment_lock(Path(sys.prefix)), "mitmproxy": environment_lock(
        env_dir("mitmproxy"))}
    if getattr(exp.model, "source", "") != "openai-compatible":
        envs["vllm"] = environment_lock(env_dir("vllm"))
    if exp.trainer.kind == "verl":
        envs["verl"] = environment_lock(env_dir("verl"))
    return envs


def _files_hash(directory: Path) -> str:
    """SHA-256 over the directory's files (names and contents), cached by path, size and modification time."""
    files = sorted(p for p in directory.rglob("*") if p.is_file())
    key = json.dumps([[str(p), p.stat().st_size, p.stat().st_mtime_ns] for p in files])
    cache_path = forge_home() / "cache" / "content-hashes.json"
    try:
        cache: dict[str, str] = json.loads(cache_path.read_text())
    except (OSError, ValueError):
        cache = {}
    digest = hashlib.sha256(key.encode()).hexdigest()
    if digest in cache:
        return cache[digest]
    total = hashlib.sha256()
    for path in files:
        total.update(str(path.relative_to(directory)).encode() + b"\0")
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                total.update(chunk)
    cache[digest] = total.hexdigest()
    cache_path.parent.mkdir(parents=True, exist_ok=True)
    cache_path.write_text(json.dumps(cache))
    return cache[digest]


def model_hash(directory: Path) -> str | None:
    """The content hash of a model directory (its forge manifest of file hashes when it has one)."""
    from forge_cli.serve.prepare import MANIFEST as MODEL_MANIFEST

    if not directory.is_dir():
        return None
    own = directory / MODEL_MANIFEST
    if own.is_file():
        try:
            files = json.loads(own.read_text()).get("files", {})
            return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
        except (OSError, ValueError):
            pass
    return _files_hash(directory)


def _model(exp: Experiment) -> dict[str, Any]:
    model = exp.model
    source = getattr(model, "source", "")
    if source == "openai-compatible":
        return {"source": source, "base_url": getattr(model, "base_url", None), "model": getattr(model, "model", None)}
    path = getattr(model, "path", None)
    if path is None:
        from forge_cli.serve.prepare import default_model_dir

        directory = default_model_dir()
    else:
        directory = Path(path).expanduser()
    return {"source": source, "path": str(path) if path else None, "content_sha256": model_hash(directory)}


def _fingerprint(name: str) -> str | None:
    """The SHA-256 of the harness's committed fingerprint file (None: none, or a harness config forge cannot find)."""
    try:
        path = fingerprint_path(known_harnesses()[name])
        return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
    except (KeyError, OSError, UserError):
        return None


def build(exp: Experiment, data: dict[str, Any]) -> dict[str, Any]:
    """The manifest of a run of ``exp`` (``data``: the composed experiment as written to config.yaml)."""
    package = exp.harness.package
    return {
        "forge": _forge(),
        "python": sys.version.split()[0],
        "machine": machine(),
        "environments": _environments(exp),
        "harness": {"name": exp.harness.name, "package": getattr(package, "name", None),
                    "version": getattr(package, "version", None), "fingerprint_sha256": _fingerprint(exp.harness.name)},
        "model": _model(exp),
        "seeds": {"run.seed": exp.run.seed, "rollout.sampling.seed": exp.rollout.sampling.seed},
        "config_sha256": hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest(),
    }


def write(run_dir: Path, exp: Experiment, data: dict[str, Any]) -> dict[str, Any]:
    manifest = build(exp, data)
    (run_dir / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def read(run_dir: Path) -> dict[str, Any] | None:
    try:
        loaded = json.loads((run_dir / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def _flat(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(_flat(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: node}


def differences(a: dict[str, Any] | None, b: dict[str, Any] | None, *, ignore: tuple[str, ...] = ()) -> list[str]:
    """What two manifests disagree on, one ``key: A -> B`` line each (a run without one says so)."""
    if a is None or b is None:
        return [] if a is b else ["manifest.json: only one of the runs has one (written since forge records it)"]
    fa, fb = _flat(a), _flat(b)
    return [f"{k}: {fa.get(k)} -> {fb.get(k)}" for k in sorted(set(fa) | set(fb))
            if fa.get(k) != fb.get(k) and not k.startswith(ignore)]
