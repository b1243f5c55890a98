"""A SandboxSpec as Docker SDK ``containers.create`` arguments, and as the equivalent ``docker run``."""

from __future__ import annotations

import shlex
from typing import Any

from forge_cli.runtime.spec import SandboxSpec


def idle_command(spec: SandboxSpec) -> list[str]:
    """The container idles while forge execs the harness and verifiers into it; it exits by itself at the
    sandbox's deadline, so a sandbox whose forge process died does not run on forever."""
    return ["sleep", str(spec.timeout_s)]


# with a user: the workdir made writable for every user (by root, before the first command), as Kubernetes makes a
# pod's emptyDir; a tmpfs would do the same but hides the workdir from docker's archive API (docker cp)
WORKDIR_MODE = "0777"


def container_kwargs(spec: SandboxSpec, layout: str = "docker", user: str | None = None) -> dict[str, Any]:
    """Keyword arguments for ``docker.containers.create`` (one container per rollout); ``layout`` and ``user`` as
    ``DockerRuntime``'s."""
    kwargs: dict[str, Any] = {
        "image": spec.image,
        "command": idle_command(spec),
        "name": spec.name,
        "labels": spec.all_labels,
        "environment": dict(spec.env),
        "working_dir": spec.workdir,
        "network_mode": spec.network if spec.network == "host" else None,
        "network": None if spec.network == "host" else spec.network,
        "nano_cpus": int(spec.resources.cpus * 1e9),
        "mem_limit": spec.resources.memory_bytes,
        "memswap_limit": spec.resources.memory_bytes,
        "pids_limit": spec.resources.pids,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "init": True,
        "detach": True,
        "volumes": {},
    }
    if spec.bundle_host_path:
        kwargs["volumes"][spec.bundle_host_path] = {"bind": spec.bundle_mount, "mode": "ro"}
    if layout == "pod":  # as k8s_manifests' sandbox pod: sleep infinity as PID 1, execs only
        from forge_cli.runtime.k8s_manifests import POD_IDLE

        kwargs.update(init=False, command=list(POD_IDLE))
    if user is not None:
        kwargs["user"] = user
    return {k: v for k, v in kwargs.items() if v is not None}


def docker_run_command(spec: SandboxSpec, layout: str = "docker", user: str | None = None) -> str:
    """The ``docker run`` command line equivalent to :func:`container_kwargs` (for plans and docs); ``layout=pod``:
    no ``--init``, ``sleep infinity`` as PID 1 (``DockerRuntime.layout``)."""
    kw = container_kwargs(spec, layout, user)
    args = ["docker", "run", "-d", *(["--init"] if kw["init"] else []), "--name", kw["name"]]
    for key, value in kw["labels"].items():
        args += ["--label", f"{key}={value}"]
    if "network_mode" in kw:
        args += ["--network", kw["network_mode"]]
    else:
        args += ["--network", kw["network"]]
    args += ["--cpus", f"{spec.resources.cpus:g}", "--memory", spec.resources.memory,
             "--memory-swap", spec.resources.memory, "--pids-limit", str(spec.resources.pids),
             "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "-w", spec.workdir]
    for host, bind in kw["volumes"].items():
        args += ["-v", f"{host}:{bind['bind']}:{bind['mode']}"]
    if "user" in kw:
        args += ["--user", kw["user"]]
    for key, value in kw["environment"].items():
        args += ["-e", f"{key}={value}"]
    args += [kw["image"], *kw["command"]]
    return shlex.join(args)
