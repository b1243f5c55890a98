"""``forge k8s manifests``: what a cluster needs before forge runs sandboxes in it."""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(help="Kubernetes helpers for the kubernetes sandbox runtime.", no_args_is_help=True)


@app.command("manifests")
def manifests(
    namespace: Annotated[str | None, typer.Option(help="Namespace (default: runtime.namespace).")] = None,
    proxy_image: Annotated[str | None, typer.Option(help="Image of the capture proxy Deployment.")] = None,
    proxy_port: Annotated[int | None, typer.Option(help="Port of the proxy Service.")] = None,
    proxy_upstream: Annotated[str | None, typer.Option(help="Policy server URL(s) the proxy forwards to.")] = None,
) -> None:
    """Print the namespace, service accounts, RBAC, and the proxy Deployment and Service as YAML
    (apply with: forge k8s manifests | kubectl apply -f -)."""
    import yaml

    from forge_cli.cli.runtime_common import load_runtime
    from forge_cli.runtime.k8s_manifests import cluster_manifests

    runtime = load_runtime("kubernetes", namespace=namespace, proxy_image=proxy_image, proxy_port=proxy_port,
                           proxy_upstream=proxy_upstream)
    typer.echo(yaml.safe_dump_all(cluster_manifests(runtime), sort_keys=False, width=120), nl=False)
