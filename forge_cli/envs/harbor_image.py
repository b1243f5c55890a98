"""Images of Harbor tasks: each task's ``environment/`` built once on the local docker daemon, tagged by content.

A task's image is ``forge-harbor-<task>:<sha12>``, where ``sha12`` hashes everything in ``environment/`` (paths,
contents, executable bits, symlink targets). A tag that already exists is reused without a build, so an unchanged
task is built once per daemon, and an edited one gets a new tag (old tags stay until ``docker image prune``).
The base image a Dockerfile names is not part of the hash: after rebuilding ``forge-base:bookworm``, remove the
``forge-harbor-*`` images to rebuild on top of it. Like the rest of forge, nothing is pulled: ``FROM`` must name
an image on the daemon.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from forge_cli.errors import UserError
from forge_cli.runtime.base import SandboxError, SandboxUnavailable

TAG_PREFIX = "forge-harbor-"
_NOT_NAME = re.compile(r"[^a-z0-9]+")


def content_hash(directory: Path) -> str:
    """sha256 (hex) of a directory tree: every entry's relative path, kind, executable bit and content (symlinks
    by their target, never followed); independent of timestamps, owners and the directory's own location."""
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(directory, followlinks=False):
        dirs.sort()
        base = Path(root)
        for name in sorted([*dirs, *files]):
            path = base / name
            rel = path.relative_to(directory).as_posix()
            if path.is_symlink():
                entry = f"L\0{rel}\0{os.readlink(path)}"
            elif path.is_dir():
                entry = f"D\0{rel}"
            else:
                executable = "x" if os.access(path, os.X_OK) else "-"
                entry = f"F\0{rel}\0{executable}\0{hashlib.sha256(path.read_bytes()).hexdigest()}"
            digest.update(entry.encode() + b"\n")
    return digest.hexdigest()


def image_tag(task_name: str, environment_dir: Path) -> str:
    """``forge-harbor-<task>:<sha12>`` for a task whose environment is ``environment_dir``."""
    name = _NOT_NAME.sub("-", task_name.lower()).strip("-")[:100] or "task"
    return f"{TAG_PREFIX}{name}:{content_hash(environment_dir)[:12]}"


def image_workdir(client: Any, image: str) -> str | None:
    """The image's ``WORKDIR`` (None when it sets none), or None when the daemon does not have the image."""
    import docker.errors

    try:
        config = client.api.inspect_image(image).get("Config") or {}
    except docker.errors.ImageNotFound:
        return None
    return str(config.get("WorkingDir") or "") or None


def has_image(client: Any, image: str) -> bool:
    """Whether the daemon has ``image``."""
    import docker.errors

    try:
        client.api.inspect_image(image)
    except docker.errors.ImageNotFound:
        return False
    return True


def ensure_image(runtime: Any, tag: str, environment_dir: Path, timeout_s: float,
                 log: Callable[[str], None]) -> bool:
    """Build ``tag`` from ``environment_dir/Dockerfile`` unless the daemon has it; True when it was built.

    A failed build raises UserError (exit 1) naming the Dockerfile with the end of the build log; a build running
    past ``timeout_s`` raises the same (the daemon cancels the build when forge exits). dockerd unreachable is
    :class:`SandboxUnavailable` (exit 1, with the fix), as everywhere in forge.
    """
    from forge_cli.runtime.docker import client_for
    from forge_cli.runtime.images import build_image

    client = client_for(runtime)
    if has_image(client, tag):
        log(f"harbor: {tag} is built (cached)")
        return False
    dockerfile = environment_dir / "Dockerfile"
    log(f"harbor: building {tag} from {dockerfile}")
    outcome: dict[str, BaseException | None] = {"error": None}

    def build() -> None:
        try:
            build_image(runtime, tag, environment_dir, dockerfile)
        except BaseException as error:  # handed to the waiting thread
            outcome["error"] = error

    # a daemon thread: a build that outlives its timeout must not hold forge's exit
    worker = threading.Thread(target=build, name=f"harbor-build-{tag}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise UserError(f"{dockerfile}: building image {tag} did not finish within {math.ceil(timeout_s)}s",
                        fix="raise [environment].build_timeout_sec in the task's task.toml, or make the build "
                            "lighter", exit_code=1)
    error = outcome["error"]
    if isinstance(error, SandboxUnavailable):
        raise error
    if isinstance(error, SandboxError):
        raise UserError(f"{dockerfile}: {error.message}", exit_code=1,
                        fix="fix the Dockerfile; FROM must name an image on this daemon (forge-base:bookworm from "
                            "scripts/base-image.sh): nothing is pulled") from error
    if error is not None:
        raise error
    return True
