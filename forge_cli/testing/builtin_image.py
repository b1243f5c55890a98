"""The conformance kit of an image forge ships (``forge_cli/runtime/images.py``'s ``BuiltinImage``).

    problems = check_builtin_image("mine")
    assert not problems, problems

It resolves ``name`` through the registry as ``forge image build --builtin`` does, then checks what that command and
the cluster path rely on: a ``BuiltinImage`` registered under its own name, a default tag that is a valid image
reference, a one-line summary (``forge image builtins`` prints it); and, unless ``prepare=False`` (an image whose
context takes minutes, such as the controller's wheels), that :meth:`prepare` writes its context into the directory it
is given and nothing outside it, returns a Dockerfile inside it, and that the Dockerfile's first ``FROM`` names an
image without a registry host (forge never pulls: the base must be on the local daemon).
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Sequence
from pathlib import Path

from forge_cli.errors import UserError
from forge_cli.runtime.images import BuiltinImage, builtin_image

# docker's reference grammar, simplified: lower-case path components separated by / (an optional registry host
# first), then an optional :tag
REFERENCE = re.compile(r"^(?:[a-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
                       r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$")


def _registry_host(image: str) -> str | None:
    """The registry host an image reference names (``registry.example.com/x``, ``localhost:5000/x``), or None."""
    first, sep, _ = image.partition("/")
    return first if sep and ("." in first or ":" in first or first == "localhost") else None


def check_builtin_image(name: str, harnesses: Sequence[str] = (), prepare: bool = True) -> list[str]:
    """Problems of the builtin image registered as ``name`` (``harnesses``: what ``--harness`` would give it)."""
    try:
        cls = builtin_image(name)
    except UserError as exc:
        return [exc.message]
    if not (isinstance(cls, type) and issubclass(cls, BuiltinImage)):
        return [f"{name!r} is registered with {cls!r}, not a BuiltinImage subclass"]
    problems: list[str] = []
    if ":" not in name and cls.name != name:
        problems.append(f"registered as {name!r} but names itself {cls.name!r}")
    if not REFERENCE.match(cls.tag or ""):
        problems.append(f"its default tag {cls.tag!r} is not an image reference (name:tag)")
    if not cls.summary or "\n" in cls.summary:
        problems.append("it needs a one-line summary (forge image builtins prints it)")
    if not prepare:
        return problems
    try:
        image = cls(harnesses)
    except UserError as exc:
        return [*problems, f"it refuses --harness {list(harnesses)}: {exc.message}"]
    except TypeError as exc:  # an abstract prepare left unimplemented
        return [*problems, f"it cannot be made: {exc}"]
    with tempfile.TemporaryDirectory(prefix="forge-image-kit-") as tmp:
        context = Path(tmp) / "context"
        context.mkdir()
        said: list[str] = []
        try:
            dockerfile = image.prepare(context, said.append)
        except Exception as exc:
            return [*problems, f"prepare failed: {type(exc).__name__}: {exc}"]
        outside = sorted(p.name for p in Path(tmp).iterdir() if p != context)
        if outside:
            problems.append(f"prepare wrote outside the context it was given: {outside}")
        dockerfile = Path(dockerfile)
        if not dockerfile.is_file() or not dockerfile.resolve().is_relative_to(context.resolve()):
            return [*problems, f"prepare returned {dockerfile}, not a Dockerfile inside the context"]
        froms = re.findall(r"^\s*FROM\s+(\S+)", dockerfile.read_text(), flags=re.M | re.I)
        if not froms:
            problems.append("its Dockerfile has no FROM")
        elif _registry_host(froms[0]):
            problems.append(f"its Dockerfile is FROM {froms[0]}, an image of registry {_registry_host(froms[0])}: "
                            "forge never pulls; build FROM an image on the local daemon (forge-base:bookworm)")
        if not all(isinstance(line, str) for line in said):
            problems.append("it reports progress with something other than text")
    return problems
