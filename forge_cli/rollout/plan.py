"""The plan of a rollout run: what would run, where and how, with no side effects.

``forge rollout --dry-run`` prints it; the real run executes the same rollout specs.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

import yaml

from forge_cli.config.schema import Experiment, KubernetesRuntime, LocalRuntime, OpenAICompatibleModel
from forge_cli.envs.registry import load_tasks
from forge_cli.envs.task import Task
from forge_cli.harness.adapter import Invocation, RolloutContext, ToolsContext, prepare
from forge_cli.harness.bundle_paths import binary_fix, bundle_dir, is_installed
from forge_cli.runtime.docker_spec import docker_run_command
from forge_cli.runtime.k8s_manifests import network_policy, pod_manifest
from forge_cli.runtime.spec import ProxyEndpoint, SandboxSpec, label_value

MASKED_KEY = "fk-****masked****"
MASKED_TOOLS_KEY = "ft-****masked****"
SECRET_NAME = re.compile(r"(^|_)(KEY|TOKEN|SECRET|PASSWORD|CREDENTIALS?)$", re.IGNORECASE)
# where a local sandbox lives is chosen at run time; plans show this placeholder
LOCAL_SANDBOX = "$SANDBOX"
CONTAINER_HOME = "/tmp/forge-home"


class _NoAliases(yaml.SafeDumper):
    """Manifests are read by people: repeat shared sub-trees instead of emitting YAML anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def mask_env(env: dict[str, str]) -> dict[str, str]:
    """Env vars as shown to people: secrets replaced by ``****``."""
    return {k: ("****" if SECRET_NAME.search(k) else v) for k, v in env.items()}


def rollout_id(run_id: str, task_id: str, sample: int) -> str:
    """Stable, URL- and label-safe id of one rollout."""
    slug = re.sub(r"[^a-z0-9]+", "-", task_id.lower()).strip("-")[:32] or "task"
    digest = hashlib.sha256(f"{run_id}/{task_id}/{sample}".encode()).hexdigest()[:6]
    return f"{slug}-{sample}-{digest}"


@dataclass
class RolloutPlan:
    rollout_id: str
    task_id: str
    group_id: str
    instruction: str
    proxy_base_url: str
    sandbox: dict[str, Any]
    bundle: dict[str, Any]
    config_files: dict[str, str]
    command: list[str]
    command_line: str
    env: dict[str, str]
    timeouts: dict[str, int]
    resources: dict[str, Any]
    # the task's tools and how the harness gets them (None: the task has no tools)
    tools: dict[str, Any] | None = None


@dataclass
class Plan:
    run_id: str
    choices: dict[str, str]
    tasks: dict[str, Any]
    num_tasks: int
    samples_per_task: int
    num_rollouts: int
    concurrency: int
    upstream: str
    proxy: str
    rollouts: list[RolloutPlan]
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def upstream_url(exp: Experiment) -> str:
    """The policy server(s) the proxy forwards to."""
    if exp.proxy.upstream:
        return exp.proxy.upstream
    if isinstance(exp.model, OpenAICompatibleModel):
        return exp.model.base_url.removesuffix("/v1").rstrip("/")
    return f"http://{exp.model.host}:{exp.model.port}"


def proxy_endpoint(exp: Experiment) -> ProxyEndpoint:
    """The proxy as sandboxes reach it: host networking → the advertised host; a pod → the Service."""
    rt = exp.runtime
    if isinstance(rt, KubernetesRuntime):
        return ProxyEndpoint(f"{rt.proxy_service}.{rt.namespace}.svc", rt.proxy_port)
    return ProxyEndpoint(exp.proxy.advertise_host, exp.proxy.port)


def sandbox_paths(exp: Experiment) -> tuple[str, str, str]:
    """(workdir, home, bundle path) as the harness sees them inside the sandbox (local: placeholders)."""
    if isinstance(exp.runtime, LocalRuntime):
        return f"{LOCAL_SANDBOX}/work", f"{LOCAL_SANDBOX}/home", str(bundle_dir(exp.harness))
    return exp.runtime.workdir, CONTAINER_HOME, exp.runtime.bundle_mount


def tools_base_url(exp: Experiment, port: int | str | None = None) -> str:
    """The tool server as sandboxes reach it (a dry run shows $TOOLS_PORT when the port is picked at run time)."""
    port = port or exp.tools.port or "$TOOLS_PORT"
    return f"http://{exp.tools.advertise_host}:{port}"


def tools_plan(exp: Experiment, task: Task, ctx: ToolsContext) -> dict[str, Any]:
    """What a dry run shows of a task's tools: where they are served and how this harness gets them."""
    via = exp.harness.tools.via
    return {"server": ctx.url.rsplit("/r/", 1)[0], "via": via,
            "endpoint": f"{ctx.url}/mcp" if via == "mcp" else f"{ctx.url}/tools/<name>",
            "tools": [t.name for t in task.tools],
            "log": "rollouts/<id>/tool_calls.jsonl"}


def build_spec(exp: Experiment, run_id: str, rid: str, task: Task, env: dict[str, str],
               files: dict[str, str]) -> SandboxSpec:
    """The sandbox of one rollout: the env's image, the task's files, the harness bundle read-only."""
    network = "host"
    if isinstance(exp.runtime, KubernetesRuntime):
        network = "proxy-only"
    elif not isinstance(exp.runtime, LocalRuntime):
        network = exp.runtime.network
    return SandboxSpec(
        run_id=run_id, rollout_id=rid, image=task.image or exp.env.image, workdir=exp.runtime.workdir,
        env=env, files={**task.files, **files}, resources=exp.runtime.resources, network=network,
        proxy=proxy_endpoint(exp), timeout_s=exp.rollout.timeout_s, bundle_host_path=str(bundle_dir(exp.harness)),
        bundle_mount=exp.runtime.bundle_mount, labels={"forge.task": label_value(task.id)},
    )


def describe_sandbox(exp: Experiment, spec: SandboxSpec, inv: Invocation) -> dict[str, Any]:
    """The sandbox as the user would create it by hand, per backend."""
    rt = exp.runtime
    if isinstance(rt, KubernetesRuntime):
        manifests = [pod_manifest(spec, rt), network_policy(spec, rt)]
        return {"kind": "kubernetes", "context": rt.context or "(current)",
                "manifests": yaml.dump_all(manifests, Dumper=_NoAliases, sort_keys=False)}
    if isinstance(rt, LocalRuntime):
        env = " ".join(shlex.quote(f"{k}={v}") for k, v in spec.env.items())
        return {"kind": "local",
                "command": f"mkdir -p {LOCAL_SANDBOX}/work {LOCAL_SANDBOX}/home && cd {spec.workdir} && "
                           f"env -i {env} {shlex.join(inv.argv)}",
                "note": f"{LOCAL_SANDBOX} is a fresh temporary directory; the process group is killed "
                        f"after {spec.timeout_s}s"}
    # the container already holds the env; exec inherits it
    return {"kind": "docker", "docker_run": docker_run_command(spec),
            "exec": f"docker exec -i -w {spec.workdir} {spec.name} {shlex.join(inv.argv)} </dev/null"}


def context_shortfall(exp: Experiment) -> str | None:
    """Why the served context cannot hold this harness's own first prompt plus an answer, or None."""
    need = exp.harness.min_context
    if need is None or exp.model.max_model_len >= need + exp.model.max_output_tokens:
        return None
    return (f"{exp.harness.name}'s own first prompt is ~{need} tokens, but model.max_model_len is "
            f"{exp.model.max_model_len} with {exp.model.max_output_tokens} kept for the answer: its calls would be "
            f"refused as too long. Set model.max_model_len=32768 (past the model's native context it is served "
            f"with YaRN RoPE scaling)")


def build_plan(exp: Experiment, run_id: str | None = None) -> Plan:
    """Everything a run of ``exp`` would do, computed without touching docker, a cluster or a GPU."""
    run_id = run_id or f"{exp.run.name}-dryrun"
    taskset = load_tasks(exp.env, exp.rollout.max_tasks)
    endpoint = proxy_endpoint(exp)
    workdir, home, bundle = sandbox_paths(exp)
    warnings = []
    if not taskset.available:
        warnings.append(f"task source '{exp.env.name}' is not available: {taskset.note}; "
                        "the plan shows a placeholder task")
    harness = exp.harness
    if harness.package.manager == "binary" and not harness.binary_path and not is_installed(harness):
        warnings.append(f"{harness.name} is not installed and harness.binary_path is not set (no package "
                        f"registry carries it): {binary_fix(harness)}")
    elif harness.package.manager != "builtin" and not is_installed(harness):
        warnings.append(f"harness bundle '{harness.name}' is not installed yet "
                        f"(forge harness install {harness.name})")
    if (shortfall := context_shortfall(exp)) is not None:
        warnings.append(shortfall)
    if isinstance(exp.runtime, KubernetesRuntime) and any(t.tools for t in taskset.tasks):
        warnings.append("tasks with tools need the tool server reachable from pods: set tools.host and "
                        "tools.advertise_host to an address the cluster can reach")
    rollouts: list[RolloutPlan] = []
    for task in taskset.tasks:
        for sample in range(exp.rollout.samples_per_task):
            if len(rollouts) >= exp.rollout.plan_preview:
                break
            rid = rollout_id(run_id, task.id, sample)
            tools = (ToolsContext(task.tools, f"{tools_base_url(exp)}/r/{rid}", MASKED_TOOLS_KEY)
                     if task.tools else None)
            ctx = RolloutContext(rollout_id=rid, proxy_url=endpoint.url, api_key=MASKED_KEY,
                                 instruction=task.instruction, workdir=workdir, home=home, bundle=bundle, tools=tools)
            inv = prepare(harness, exp.model, ctx)
            spec = build_spec(exp, run_id, rid, task, inv.env, inv.files)
            shown = SandboxSpec(**{**spec.__dict__, "env": mask_env(spec.env)})
            rollouts.append(RolloutPlan(
                rollout_id=rid, task_id=task.id, group_id=task.id, instruction=task.instruction,
                proxy_base_url=f"{endpoint.url}/r/{rid}/v1",
                sandbox=describe_sandbox(exp, shown, inv),
                bundle={"host_path": shown.bundle_host_path, "mounted_at": bundle,
                        "package": f"{harness.package.manager}:{harness.package.name}@{harness.package.version}",
                        "installed": harness.package.manager == "builtin" or is_installed(harness)},
                config_files=inv.files, command=inv.argv, command_line=shlex.join(inv.argv),
                env=mask_env(inv.env),
                timeouts={"rollout_s": exp.rollout.timeout_s, "harness_s": inv.timeout_s,
                          "verifier_s": exp.env.verifier_timeout_s},
                resources=exp.runtime.resources.model_dump(),
                tools=tools_plan(exp, task, tools) if tools else None,
            ))
    n_tasks = len(taskset.tasks) if taskset.available else 0
    return Plan(
        run_id=run_id,
        choices={"harness": harness.name, "env": exp.env.name, "runtime": exp.runtime.kind,
                 "model": getattr(exp.model, "source", ""), "algo": exp.algo.name, "trainer": exp.trainer.kind},
        tasks={"available": taskset.available, "source": taskset.note},
        num_tasks=n_tasks, samples_per_task=exp.rollout.samples_per_task,
        num_rollouts=n_tasks * exp.rollout.samples_per_task, concurrency=exp.rollout.concurrency,
        upstream=upstream_url(exp), proxy=f"{exp.proxy.host}:{exp.proxy.port} (sandboxes use {endpoint.url})",
        rollouts=rollouts, warnings=warnings,
    )
