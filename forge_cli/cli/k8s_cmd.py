"""``forge k8s manifests``: what a cluster needs before forge runs sandboxes in it."""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(help="Kubernetes helpers for the kubernetes sandbox runtime.", no_args_is_help=True)


@app.command("manifests")
def manifests(
    overrides: Annotated[list[str] | None, typer.Argument(
        help="With --with-controller: the controller's forge overrides, e.g. +harness=codex env.max_tasks=10.",
        show_default=False)] = None,
    namespace: Annotated[str | None, typer.Option(help="Namespace (default: runtime.namespace).")] = None,
    proxy_image: Annotated[str | None, typer.Option(help="Image with forge installed: proxy and controller.")] = None,
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
    runtime = load_runtime("kubernetes", namespace=namespace, proxy_image=proxy_image, proxy_port=proxy_port,
                           proxy_upstream=proxy_upstream, proxy_replicas=proxy_replicas)
    docs = cluster_manifests(runtime)
    if with_controller:
        docs += controller_manifests(runtime, controller_command, overrides or [], runs_size, compose_resolved)
    typer.echo(yaml.safe_dump_all(docs, sort_keys=False, width=120), nl=False)
