"""The plan of a rollout run: what would run, where and how, with no side effects.

``forge rollout --dry-run`` prints it; the real run executes the same rollout specs.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

from forge_cli.config.schema import Experiment, OpenAICompatibleModel
from forge_cli.envs.source import Purpose, load_tasks
from forge_cli.envs.task import Task
from forge_cli.errors import UserError
from forge_cli.harness.adapter import RolloutContext, ToolsContext, harness_tools, prepare
from forge_cli.harness.bundle_paths import binary_fix, bundle_dir, is_installed
from forge_cli.harness.installer import installer_for
from forge_cli.rollout.spec import build_spec, group_id, proxy_endpoint, rollout_id
from forge_cli.runtime.registry import backend
from forge_cli.runtime.spec import SandboxSpec

MASKED_KEY = "fk-****masked****"
MASKED_TOOLS_KEY = "ft-****masked****"
SECRET_NAME = re.compile(r"(^|_)(KEY|TOKEN|SECRET|PASSWORD|CREDENTIALS?)$", re.IGNORECASE)


def mask_env(env: dict[str, str]) -> dict[str, str]:
    """Env vars as shown to people: secrets replaced by ``****``."""
    return {k: ("****" if SECRET_NAME.search(k) else v) for k, v in env.items()}


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
    # what scores the rollout (None: not scored)
    verifier: str | None = None
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
    # sampling parameters the proxy enforces on every call (empty: the harness's own)
    sampling: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def upstream_url(exp: Experiment) -> str:
    """The policy server(s) the proxy forwards to."""
    if exp.proxy.upstream:
        return exp.proxy.upstream
    if isinstance(exp.model, OpenAICompatibleModel):
        return exp.model.base_url.removesuffix("/v1").rstrip("/")
    return f"http://{exp.model.host}:{exp.model.port}"


def tools_base_url(exp: Experiment, port: int | str | None = None) -> str:
    """The tool server as sandboxes reach it (a dry run shows $TOOLS_PORT when the port is picked at run time)."""
    port = port or exp.tools.port or "$TOOLS_PORT"
    return f"http://{exp.tools.advertise_host}:{port}"


def tools_plan(exp: Experiment, task: Task, ctx: ToolsContext) -> dict[str, Any]:
    """What a dry run shows of a task's tools: where they are served and how this harness gets them."""
    via = exp.harness.tools.via
    plan: dict[str, Any] = {"server": ctx.url.rsplit("/r/", 1)[0], "via": via,
                            "endpoint": f"{ctx.url}/mcp" if via == "mcp" else f"{ctx.url}/tools/<name>",
                            "tools": [t.name for t in ctx.tools],
                            "log": "rollouts/<id>/tool_calls.jsonl"}
    desktop = task.tool_state.get("desktop")
    if isinstance(desktop, dict):  # an OSWorld task: its own desktop container beside the harness's sandbox
        plan["desktop"] = {"image": desktop.get("image"), "observation": desktop.get("observation"),
                           "a11y_max_tokens": desktop.get("a11y_max_tokens"), "screen": desktop.get("screen")}
    return plan


# auto_context raises max_model_len to a multiple of this
CONTEXT_STEP = 1024

# seconds to prefill one fresh prompt of N tokens with the default model (SmolLM2-135M) on a 2-core CPU with native
# bf16 (AVX512-BF16/AMX; vLLM serves bfloat16): `benchmarks/serve.py --prefill 2000,9000,11500`, 2026-12-05, quiet.
# Not measured on an AVX2-only CPU (float32), where it is slower.
PREFILL_S_NATIVE_BF16 = {2000: 1.3, 9000: 10.3, 11500: 14.8}


def prefill_cost(exp: Experiment, tokens: int) -> str:
    """What prefilling a ``tokens``-long first prompt costs per call on this machine, as far as it was measured."""
    from forge_cli.config.schema import SmolModel
    from forge_cli.serve.server import cpu_has_native_bf16, serving_dtype

    model = exp.model
    how = f"`benchmarks/serve.py --prefill {tokens}` measures it"
    if not isinstance(model, SmolModel) or model.device != "cpu":
        return f"its prefill cost with this model is not measured here ({how})"
    if not cpu_has_native_bf16() or serving_dtype(model) != "bfloat16":
        return f"its prefill cost on this CPU (no native bf16, float32) is not measured yet ({how})"
    below = [n for n in PREFILL_S_NATIVE_BF16 if n <= tokens] or [min(PREFILL_S_NATIVE_BF16)]
    nearest = max(below)  # scaled linearly from the nearest measured length at or below it (attention grows faster)
    seconds = PREFILL_S_NATIVE_BF16[nearest] * tokens / nearest
    return (f"prefilling it costs ~{seconds:.0f} s per call on a 2-core CPU with native bf16 like this one "
            f"(measured: {nearest:,} tokens in {PREFILL_S_NATIVE_BF16[nearest]} s)")


def check_seed(exp: Experiment) -> None:
    """``rollout.sampling.seed`` on a CPU policy server: refused (exit 2). vLLM 0.32's CPU backend kills its engine
    on a seeded request whose prompt is prefilled in chunks (``RuntimeError: CPU Generator does not use offset`` in
    ``_bookkeeping_sync``; seen with Codex's ~5.5k-token first prompt), which would end every rollout in flight."""
    device = getattr(exp.model, "device", None)
    if exp.rollout.sampling.seed is not None and device == "cpu":
        raise UserError("rollout.sampling.seed needs a GPU policy server: vLLM's CPU backend crashes on a seeded "
                        "request whose prompt is prefilled in chunks (RuntimeError: CPU Generator does not use "
                        "offset)", fix="drop rollout.sampling.seed (null) on CPU", exit_code=2)


def fit_context(exp: Experiment) -> tuple[Experiment, str | None]:
    """``exp`` ready for its harness's own first prompt (``harness.min_context``) plus one answer
    (``model.max_output_tokens``): unchanged when the served context holds both; with ``model.auto_context`` the
    experiment with ``model.max_model_len`` raised to fit, and a note saying so; else a UserError (exit 2) with the
    fix, since every call would be refused as too long and no rollout could say anything about the agent.

    Every command that runs a harness calls it before it starts anything (dry runs too); it also refuses a sampling
    seed on a CPU policy server (``check_seed``)."""
    check_seed(exp)
    model = exp.model
    need = exp.harness.min_context
    if need is None or model.max_model_len >= need + model.max_output_tokens:
        return exp, None
    total = need + model.max_output_tokens
    served = -(-total // CONTEXT_STEP) * CONTEXT_STEP
    why = (f"{exp.harness.name}'s own first prompt is ~{need} tokens: with {model.max_output_tokens} tokens kept for "
           f"the answer (model.max_output_tokens) it needs a context of {total}, but model.max_model_len is "
           f"{model.max_model_len}, so its calls would be refused as too long")
    if isinstance(model, OpenAICompatibleModel):
        raise UserError(why, fix=f"if the endpoint serves that much context, say so: model.max_model_len={served}; "
                                 f"else use a model with a longer context or another harness", exit_code=2)
    extension = (" (past the model's native context it is served with YaRN RoPE scaling)"
                 if model.context_extension == "yarn" else "")
    if not model.auto_context:
        raise UserError(why, fix=f"model.max_model_len={served}{extension}, or model.auto_context=true to raise it "
                                 f"automatically", exit_code=2)
    fitted = exp.model_copy(update={"model": model.model_copy(update={"max_model_len": served})})
    return fitted, (f"model.auto_context: serving max_model_len={served} instead of {model.max_model_len}, so that "
                    f"{exp.harness.name}'s own first prompt (~{need} tokens) and a {model.max_output_tokens}-token "
                    f"answer fit{extension}; {prefill_cost(exp, need)}. A model.max_model_len set on the command "
                    f"line is kept as given")


def build_plan(exp: Experiment, run_id: str | None = None, purpose: Purpose = "rollout") -> Plan:
    """Everything a run of ``exp`` would do, computed without touching docker, a cluster or a GPU."""
    run_id = run_id or f"{exp.run.name}-dryrun"
    exp, context_note = fit_context(exp)
    if not isinstance(exp.model, OpenAICompatibleModel) and exp.model.path is not None:
        from forge_cli.serve.prepare import model_path

        model_path(exp.model)  # a model.path the user gave must exist (exit 2), dry run or not
    backend(exp.runtime.kind).check_proxy(exp.runtime, exp.proxy.url)
    taskset = load_tasks(exp.env, exp.rollout.max_tasks, purpose=purpose)
    taskset.source.check_runtime(exp.runtime.kind)
    endpoint = proxy_endpoint(exp)
    sandbox_backend = backend(exp.runtime.kind)
    workdir, home, bundle = sandbox_backend.sandbox_paths(exp.runtime, str(bundle_dir(exp.harness)))
    warnings = []
    harness = exp.harness
    installer = installer_for(harness)
    if installer.user_provided and not harness.binary_path and not is_installed(harness):
        warnings.append(f"{harness.name} is not installed and harness.binary_path is not set (no package "
                        f"registry carries it): {binary_fix(harness)}")
    elif not installer.ships_with_forge and not is_installed(harness):
        warnings.append(f"harness bundle '{harness.name}' is not installed yet "
                        f"(forge harness install {harness.name})")
    if context_note is not None:
        warnings.append(context_note)
    if sandbox_backend.network(exp.runtime) != "host" and any(t.tools for t in taskset.tasks):
        warnings.append("tasks with tools need the tool server reachable from pods: set tools.host and "
                        "tools.advertise_host to an address the cluster can reach")
    rollouts: list[RolloutPlan] = []
    for task in taskset.tasks:
        for sample in range(exp.rollout.samples_per_task):
            if len(rollouts) >= exp.rollout.plan_preview:
                break
            rid = rollout_id(run_id, task.id, sample)
            given, native = harness_tools(harness, task.tools)
            tools = ToolsContext(given, f"{tools_base_url(exp)}/r/{rid}", MASKED_TOOLS_KEY) if given else None
            ctx = RolloutContext(rollout_id=rid, proxy_url=endpoint.url, api_key=MASKED_KEY,
                                 instruction=task.instruction, workdir=workdir, home=home, bundle=bundle, tools=tools,
                                 browser_cdp_url="http://127.0.0.1:$BROWSER_CDP_PORT" if native else None)
            inv = prepare(harness, exp.model, ctx)
            spec = build_spec(exp, run_id, rid, task, inv.env, inv.files, image=taskset.source.image(task))
            shown = SandboxSpec(**{**spec.__dict__, "env": mask_env(spec.env)})
            rollouts.append(RolloutPlan(
                rollout_id=rid, task_id=task.id, group_id=group_id(run_id, task.id, 0), instruction=task.instruction,
                proxy_base_url=f"{endpoint.url}/r/{rid}/v1",
                sandbox=sandbox_backend.describe(shown, inv.argv, exp.runtime),
                verifier=task.verify,
                bundle={"host_path": shown.bundle_host_path, "mounted_at": bundle,
                        "package": f"{harness.package.manager}:{harness.package.name}@{harness.package.version}",
                        "installed": installer.ships_with_forge or is_installed(harness)},
                config_files=inv.files, command=inv.argv, command_line=shlex.join(inv.argv),
                env=mask_env(inv.env),
                timeouts={"rollout_s": task.timeout_s or exp.rollout.timeout_s, "harness_s": inv.timeout_s,
                          "setup_s": exp.env.setup_timeout_s,
                          "verifier_s": task.verifier_timeout_s or exp.env.verifier_timeout_s},
                resources=exp.runtime.resources.model_dump(),
                tools=tools_plan(exp, task, tools) if tools else None,
            ))
    n_tasks = len(taskset.tasks)
    return Plan(
        run_id=run_id,
        choices={"harness": harness.name, "env": exp.env.name, "runtime": exp.runtime.kind,
                 "model": getattr(exp.model, "source", ""), "algo": exp.algo.name, "trainer": exp.trainer.kind},
        tasks={"split": taskset.split, "source": taskset.note},
        num_tasks=n_tasks, samples_per_task=exp.rollout.samples_per_task,
        num_rollouts=n_tasks * exp.rollout.samples_per_task, concurrency=exp.rollout.concurrency,
        upstream=upstream_url(exp), proxy=_proxy_line(exp, endpoint.url),
        rollouts=rollouts, warnings=warnings, sampling=exp.rollout.sampling.overrides(),
    )


def _proxy_line(exp: Experiment, sandbox_url: str) -> str:
    """The plan's capture-proxy line: forge's own (where it listens), or one it did not start (``proxy.url``)."""
    if exp.proxy.url:
        return (f"{exp.proxy.url}, not started by forge (records pulled into the run's store; sandboxes use "
                f"{sandbox_url})")
    if exp.proxy.replicas > 1:
        return (f"{exp.proxy.replicas} local replicas on {exp.proxy.host} (each rollout on the one with the fewest in "
                f"flight; records pulled into the run's store; sandboxes use {sandbox_url} and the others' ports)")
    return f"{exp.proxy.host}:{exp.proxy.port} (sandboxes use {sandbox_url})"
