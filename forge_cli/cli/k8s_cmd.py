"""``forge k8s manifests``: what a cluster needs before forge runs sandboxes in it; ``forge k8s check``: a live
canary for the cluster in the user's kubeconfig (forge_cli/runtime/k8s_canary.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from forge_cli.cli.common import ConfigDir, JsonFlag, Overrides, load

if TYPE_CHECKING:
    from forge_cli.config.schema import Experiment

# the API server's in-cluster Service: no internet needed, and never the proxy or the tool server
DEFAULT_EGRESS_TARGET = "kubernetes.default.svc:443"

app = typer.Typer(help="Kubernetes helpers for the kubernetes sandbox runtime.", no_args_is_help=True)


@app.command("manifests")
def manifests(
    overrides: Annotated[list[str] | None, typer.Argument(
        help="With --with-controller: the controller's forge overrides, e.g. +harness=codex env.max_tasks=10.",
        show_default=False)] = None,
    namespace: Annotated[str | None, typer.Option(help="Namespace (default: runtime.namespace).")] = None,
    proxy_image: Annotated[str | None, typer.Option(
        help="Image with forge installed: proxy and controller (forge image build --builtin controller; default: "
             "runtime.proxy_image).")] = None,
    bundle_image: Annotated[str | None, typer.Option(
        help="The harness bundles image the controller Job copies its bundles from (forge image build --builtin "
             "bundles; default: runtime.bundle_image).")] = None,
    pod_security: Annotated[str | None, typer.Option(
        help="The Pod Security profile the namespace enforces and sandbox pods meet: restricted, or baseline for "
             "sandbox images that must run as root (default: runtime.pod_security).")] = None,
    proxy_port: Annotated[int | None, typer.Option(help="Port of the proxy replicas.")] = None,
    proxy_upstream: Annotated[str | None, typer.Option(help="Policy server URL(s) the proxy forwards to.")] = None,
    proxy_replicas: Annotated[int | None, typer.Option(
        help="Proxy replicas (StatefulSet); forge's proxy.url lists each (default: runtime.proxy_replicas).")] = None,
    with_controller: Annotated[bool, typer.Option(
        "--with-controller", help="Also run forge itself in the cluster: a Job running forge COMMAND with the "
                                  "OVERRIDES against the replicas, the Service pods reach its tool server by, and "
                                  "a PersistentVolumeClaim for its run directories.")] = False,
    controller_command: Annotated[str, typer.Option(help="What the controller Job runs: rollout or eval.")]
    = "rollout",
    runs_size: Annotated[str, typer.Option(help="Size of the run directories' claim.")] = "10Gi",
) -> None:
    """Print the namespace, service accounts, RBAC, and the proxy replicas (StatefulSet + headless Service) as YAML,
    with --with-controller also forge's own Job (apply with: forge k8s manifests | kubectl apply -f -)."""
    import yaml

    from forge_cli.cli.runtime_common import load_runtime
    from forge_cli.envs.resolve import compose_resolved
    from forge_cli.errors import UserError
    from forge_cli.runtime.k8s_controller import controller_manifests
    from forge_cli.runtime.k8s_manifests import cluster_manifests

    if overrides and not with_controller:
        raise UserError(f"unexpected arguments {' '.join(overrides)}: overrides go to the controller Job",
                        fix="add --with-controller, or drop them", exit_code=2)
    runtime = load_runtime("kubernetes", namespace=namespace, proxy_image=proxy_image, bundle_image=bundle_image,
                           pod_security=pod_security, proxy_port=proxy_port, proxy_upstream=proxy_upstream,
                           proxy_replicas=proxy_replicas)
    docs = cluster_manifests(runtime)
    if with_controller:
        docs += controller_manifests(runtime, controller_command, overrides or [], runs_size, compose_resolved)
    typer.echo(yaml.safe_dump_all(docs, sort_keys=False, width=120), nl=False)


@app.command("check")
def check(
    overrides: Overrides = None,
    config_dir: ConfigDir = None,
    egress_target: Annotated[str, typer.Option(
        help="HOST:PORT the sandbox pod must NOT reach (its NetworkPolicy allows only the proxy, the tool server "
             "and DNS); the default needs no internet: the API server's in-cluster Service.")]
    = DEFAULT_EGRESS_TARGET,
    as_json: JsonFlag = False,
) -> None:
    """A live canary for the cluster in your kubeconfig: the first thing to run on a real cluster.

    Runs runtime=kubernetes with the OVERRIDES (e.g. runtime.namespace=forge env.image=REGISTRY/forge-base:bookworm)
    and reports each step as it runs, with its fix when it fails:

    api: the API server answers and the namespace exists (missing: exit 2);
    rbac: every verb forge uses is allowed (RBAC refused: the Role of forge k8s manifests);
    pod: one sandbox pod from the experiment's image via forge's own backend, Running (pull errors name the image);
    exec: one command in it, its output checked;
    egress: --egress-target must be blocked by the pod's NetworkPolicy (not blocked: the CNI does not enforce it);
    proxy: each in-cluster proxy replica answers the pod;
    rollout: one rollout through the in-cluster proxy when proxy.url is given (otherwise reported as not run);
    cleanup: everything it created (labelled forge.canary=true) is gone, also after a failure or Ctrl-C.

    Exit 1 when a step fails (the cluster needs the fix), 2 on bad input (no kubeconfig, unknown namespace).
    """
    if run_check(load_kubernetes(overrides, config_dir), egress_target, as_json)["failed"]:
        raise typer.Exit(1)


def load_kubernetes(overrides: list[str] | None, config_dir: Path | None) -> Experiment:
    """The experiment on runtime=kubernetes (added unless an override picks a runtime; another one: exit 2)."""
    from forge_cli.config.schema import KubernetesRuntime
    from forge_cli.errors import UserError

    given = list(overrides or [])
    if not any(o.lstrip("+~").startswith("runtime=") for o in given):
        given.insert(0, "runtime=kubernetes")
    exp = load(given, config_dir).experiment
    if not isinstance(exp.runtime, KubernetesRuntime):
        raise UserError(f"the live check runs against a Kubernetes cluster, and this experiment's runtime is "
                        f"{exp.runtime.kind}", fix="runtime=kubernetes (or leave runtime out)", exit_code=2)
    return exp


def run_check(exp: Experiment, egress_target: str, as_json: bool | None) -> dict[str, Any]:
    """Run the canary on ``exp``'s cluster, printing each step as it finishes (or, with ``as_json``, the report at
    the end, unless ``as_json`` is None: ``forge doctor --live --json`` puts the report in its own JSON)."""
    from rich.console import Console

    from forge_cli.harness.bundle_paths import bundle_dir
    from forge_cli.runtime.k8s_canary import Canary, Step, summary

    console = Console(highlight=False, soft_wrap=True)
    marks = {"ok": "[green]ok[/]     ", "FAILED": "[red]FAILED[/] ", "not run": "[yellow]not run[/]"}

    def show(step: Step) -> None:
        console.print(f"{marks[step.status]} {step.name}: ", end="")
        console.print(step.detail, markup=False)
        if step.fix:
            console.print("         fix: ", end="")
            console.print(step.fix, markup=False)

    from forge_cli.config.schema import KubernetesRuntime

    runtime = exp.runtime
    assert isinstance(runtime, KubernetesRuntime), "load_kubernetes (or doctor) checked the kind"
    rollout, skipped = rollout_step(exp)
    canary = Canary(runtime, exp.env.image, bundle=str(bundle_dir(exp.harness)), egress_target=egress_target,
                    report=show if as_json is False else lambda step: None, rollout=rollout, rollout_skipped=skipped)
    canary.connect()
    if as_json is False:
        console.print(f"checking context {runtime.context or '(current)'}, namespace {runtime.namespace} "
                      f"(everything created is labelled forge.run={canary.run_id}, forge.canary=true)", markup=False)
    report = {"run": canary.run_id, **summary(canary.run())}
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    elif as_json is False and report["failed"]:
        typer.echo(f"error: the cluster check failed at: {', '.join(report['failed'])} (each fix is printed above)",
                   err=True)
    return report


def rollout_step(exp: Experiment) -> tuple[Callable[[], str] | None, str]:
    """One rollout of the experiment's harness (react unless chosen) through the in-cluster proxy, or why not."""
    if exp.proxy.url is None:
        return None, ("a rollout needs forge to register it on the in-cluster proxy: give proxy.url (each replica as "
                      "this machine reaches it, e.g. through kubectl port-forward) with FORGE_PROXY_TOKEN set, and a "
                      "policy server behind runtime.proxy_upstream, to run one (docs/sandboxes.md)")

    def one_rollout() -> str:
        from forge_cli.errors import UserError
        from forge_cli.rollout.run import execute

        settings = exp.rollout.model_copy(update={"max_tasks": 1, "samples_per_task": 1, "concurrency": 1})
        one = exp.model_copy(update={"rollout": settings})
        result = execute(one, one.model_dump(mode="json"), quiet=True)
        statuses = result.get("status") or {}
        calls = int(result.get("calls") or 0)
        recorded = f"{calls} model call{'' if calls == 1 else 's'} recorded through the in-cluster proxy"
        if set(statuses) != {"ok"} or not calls:
            raise UserError(f"1 rollout of {exp.harness.name}: status {statuses}, {recorded}",
                            fix=f"read the rollout's harness log and results in {result.get('run_dir')}")
        return (f"1 rollout of {exp.harness.name}: {recorded}, reward {result.get('mean_reward')}; run "
                f"{result.get('run_dir')}")

    return one_rollout, ""
