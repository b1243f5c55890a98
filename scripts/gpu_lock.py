#!/usr/bin/env python3
"""The lock of veRL's GPU environment (``scripts/requirements/verl-gpu.txt``) for Linux x86-64, CPython 3.11 and 3.12.

    python3 scripts/gpu_lock.py check      # quick, offline: CI (tests/train/test_gpu_lock.py)
    python3 scripts/gpu_lock.py compile    # the full resolve (uv, PyPI; ~1 minute): rewrites the locks
    python3 scripts/gpu_lock.py resolve    # the full resolve, beside the committed locks (make test-e2e)

A GPU host cannot be tested here (no CUDA, no vLLM build for it), so what can break first, the resolve itself, is
pinned instead: ``compile`` resolves the requirements with ``uv pip compile --python-platform
x86_64-manylinux_2_31 --python-version 3.X --only-binary :all:`` (the wheels a GPU node installs, none built from
source but a pure-Python sdist) into ``verl-gpu-py3X.lock``, whose
first line holds the requirements file's sha256. ``check`` fails when a lock was not compiled from the requirements
as they are now, when a requirement's pin is not what the lock holds, or when the lock loses the versions forge's
veRL integration is written against (verl 0.9.1, vllm 0.24.0, torch 2.11.*). ``scripts/setup.sh verl-gpu``
installs the lock of the running Python.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent / "requirements"
REQUIREMENTS = HERE / "verl-gpu.txt"
PYTHONS = ("3.11", "3.12")
# glibc 2.31 (Ubuntu 20.04, RHEL 9 and newer): vLLM 0.24.0's llguidance (>=1.7,<1.8) has x86-64 wheels for
# manylinux_2_31 only; for an older glibc the resolve picks its sdist, which needs a Rust toolchain to build
PLATFORM = "x86_64-manylinux_2_31"
# every package installs from a wheel except these pure-Python sdists (hydra-core's antlr4 runtime has no wheel)
SDISTS = ("antlr4-python3-runtime",)
EXPECTED = {"verl": "0.9.1", "vllm": "0.24.0", "torch": "2.11."}  # a value ending in '.' is a prefix
HEADER = "# sha256 of verl-gpu.txt: "


def lock_path(python: str) -> Path:
    return HERE / f"verl-gpu-py{python.replace('.', '')}.lock"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def pins(lock: Path) -> dict[str, str]:
    """``name==version`` lines of a lock, by normalised name."""
    out = {}
    for line in lock.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;]+)", line)
        if match:
            out[_name(match.group(1))] = match.group(2)
    return out


def requirements(path: Path) -> list[tuple[str, str | None]]:
    """(name, pinned version or None) of each requirement line."""
    out = []
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*(?:==\s*([^\s;,]+))?", line)
        if match:
            out.append((_name(match.group(1)), match.group(2)))
    return out


def problems(requirements_file: Path = REQUIREMENTS, python: str = PYTHONS[0], lock: Path | None = None) -> list[str]:
    """What is wrong with the lock of ``python`` against ``requirements_file`` (empty: nothing)."""
    lock = lock or lock_path(python)
    if not lock.is_file():
        return [f"{lock.name} is missing: python3 scripts/gpu_lock.py compile"]
    found = []
    first = lock.read_text().splitlines()[:1]
    if first != [HEADER + digest(requirements_file)]:
        found.append(f"{lock.name} was not compiled from {requirements_file.name} as it is now (its sha256 differs): "
                     "python3 scripts/gpu_lock.py compile")
    held = pins(lock)
    for name, version in requirements(requirements_file):
        if name not in held:
            found.append(f"{name} is required but not in {lock.name}")
        elif version is not None and held[name] != version:
            found.append(f"{name}=={version} is required but {lock.name} holds {name}=={held[name]}")
    for name, version in EXPECTED.items():
        have = held.get(name)
        if have is None or not (have.startswith(version) if version.endswith(".") else have == version):
            wanted = f"{version}*" if version.endswith(".") else version
            found.append(f"{lock.name} holds {name} {have or 'not at all'}, not {wanted}")
    return found


def resolve(python: str, out: Path, requirements_file: Path = REQUIREMENTS) -> None:
    """The full resolve with uv (PyPI), written to ``out`` with the requirements' sha256 as its first line;
    SystemExit with uv's explanation when the requirements cannot be resolved."""
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    with tempfile.TemporaryDirectory() as tmp:
        compiled = Path(tmp) / "lock.txt"
        done = subprocess.run([uv, "pip", "compile", str(requirements_file), "--python-platform", PLATFORM,
                               "--python-version", python, "--only-binary", ":all:",
                               *[a for name in SDISTS for a in ("--no-binary", name)], "--no-header", "--quiet",
                               "-o", str(compiled)],
                              capture_output=True, text=True)
        if done.returncode != 0 or not compiled.is_file():
            raise SystemExit(f"{requirements_file.name} does not resolve for CPython {python} on {PLATFORM}:\n"
                             f"{done.stderr.strip()}")
        body = compiled.read_text()
    out.write_text(f"{HEADER}{digest(requirements_file)}\n# uv pip compile --python-platform {PLATFORM} "
                   f"--python-version {python} --only-binary :all: (sdists: {', '.join(SDISTS)}; scripts/"
                   f"gpu_lock.py compile)\n{body}")


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "check"
    if command == "check":
        found = [p for python in PYTHONS for p in problems(python=python)]
        for problem in found:
            print(f"gpu lock: {problem}", file=sys.stderr)
        if not found:
            print(f"gpu lock: {', '.join(lock_path(p).name for p in PYTHONS)} match {REQUIREMENTS.name}")
        return 1 if found else 0
    if command == "compile":
        for python in PYTHONS:
            resolve(python, lock_path(python))
            print(f"gpu lock: wrote {lock_path(python)}")
        return main(["check"])
    if command == "resolve":
        differ = []
        with tempfile.TemporaryDirectory() as tmp:
            for python in PYTHONS:
                fresh = Path(tmp) / lock_path(python).name
                resolve(python, fresh)
                if pins(fresh) != pins(lock_path(python)):
                    differ.append(python)
        for python in PYTHONS:  # a newer release within a range is news, not a failure: the lock is what installs
            print(f"gpu lock: {REQUIREMENTS.name} resolves for CPython {python} on {PLATFORM}; "
                  + (f"PyPI now picks other versions than {lock_path(python).name} (python3 scripts/gpu_lock.py "
                     "compile takes them)" if python in differ else f"the same versions as {lock_path(python).name}"))
        return 0
    print(f"usage: gpu_lock.py check|compile|resolve (not {command!r})", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
