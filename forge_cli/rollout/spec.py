"""The sandbox spec of one rollout, computed the same way by a run and by its dry-run plan.

Everything backend-specific (how sandboxes reach the proxy, which network they get) comes from the backend's
own classmethods (``forge_cli/runtime/base.py``), looked up by ``runtime.kind``.
"""

from __future__ import annotations

import hashlib
import re

from forge_cli.config.schema import Experiment, Resources
from forge_cli.envs.task import Task
from forge_cli.harness.bundle_paths import bundle_dir
from forge_cli.runtime.base import Sandbox
from forge_cli.runtime.registry import backend
from forge_cli.runtime.spec import ProxyEndpoint, SandboxSpec, label_value


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:32] or "task"


def rollout_id(run_id: str, task_id: str, sample: int, step: int = 0, incarnation: int = 0) -> str:
    """Stable, URL- and label-safe id of one rollout, unique per (run, step, task, sample) and per start of the run
    (``incarnation``: 0 for a new run, then one more per ``--resume``, so a step re-run after a crash never reuses
    the ids, sandbox names or trace records of the attempt that was cut off)."""
    salt = f"/{incarnation}" if incarnation else ""
    digest = hashlib.sha256(f"{run_id}/{step}/{task_id}/{sample}{salt}".encode()).hexdigest()[:6]
    return f"{_slug(task_id)}-{sample}-{digest}"


def group_id(run_id: str, task_id: str, step: int) -> str:
    """Id of the group of rollouts of one task in one batch: a task sampled again later forms a new group."""
    digest = hashlib.sha256(f"{run_id}/{step}/{task_id}".encode()).hexdigest()[:8]
    return f"{_slug(task_id)}-s{step}-{digest}"


def proxy_endpoint(exp: Experiment, port: int | None = None, url: str | None = None,
                   replica: int = 0, backend_class: type[Sandbox] | None = None) -> ProxyEndpoint:
    """The capture proxy as the run's sandboxes reach it (``port``: where forge's own listens; default proxy.port).
    A proxy forge did not start (``url``, default the first of ``proxy.url``; ``replica``: its place in
    ``proxy.url``) is reached at its own address, or where the runtime says (a pod reaches an in-cluster replica by
    its StatefulSet name)."""
    url = url or (exp.proxy.url.split(",")[0].strip() if exp.proxy.url else None)
    sandbox = backend_class or backend(exp.runtime.kind)
    if url:
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        return sandbox.proxy_endpoint(
            exp.runtime, str(parts.hostname), parts.port or (443 if parts.scheme == "https" else 80), replica)
    return sandbox.proxy_endpoint(exp.runtime, exp.proxy.advertise_host, exp.proxy.port if port is None else port)


def task_workdir(exp: Experiment, task: Task) -> str:
    """Where the harness starts and the verifier looks: the task's own (an image's WORKDIR), else the runtime's."""
    return str(task.metadata.get("workdir") or exp.runtime.workdir)


def task_resources(exp: Experiment, task: Task) -> Resources:
    """The task's own resources (a Harbor task.toml's cpus/memory), else the runtime's."""
    own = task.metadata.get("resources")
    return Resources(**own) if isinstance(own, dict) else exp.runtime.resources


def build_spec(exp: Experiment, run_id: str, rid: str, task: Task, env: dict[str, str],
               files: dict[str, str], image: str | None = None,
               backend_class: type[Sandbox] | None = None) -> SandboxSpec:
    """The sandbox of one rollout: the task's image, its files, the harness bundle read-only. Its deadline covers
    the harness (``task.timeout_s`` or ``rollout.timeout_s``) and the verifier after it. ``backend_class``: the
    run's sandbox backend when the caller resolved it (a run's context does), else looked up by runtime kind."""
    sandbox = backend_class or backend(exp.runtime.kind)
    verify_s = task.verifier_timeout_s or exp.env.verifier_timeout_s
    return SandboxSpec(
        run_id=run_id, rollout_id=rid, image=image or task.image or exp.env.image, workdir=task_workdir(exp, task),
        env=env, files={**task.files, **files}, resources=task_resources(exp, task),
        network=sandbox.network(exp.runtime), proxy=proxy_endpoint(exp, backend_class=sandbox),
        timeout_s=(task.timeout_s or exp.rollout.timeout_s) + verify_s + exp.env.setup_timeout_s,
        bundle_host_path=str(bundle_dir(exp.harness)), bundle_mount=exp.runtime.bundle_mount,
        labels={"forge.task": label_value(task.id)},
    )
