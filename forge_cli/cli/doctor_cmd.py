"""``forge doctor``: is this machine ready for the experiment? With ``--live`` (runtime=kubernetes), is the cluster?"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Annotated, Any

import typer

from forge_cli.cli.common import ConfigDir, JsonFlag, Overrides, load


def doctor(overrides: Overrides = None, config_dir: ConfigDir = None, as_json: JsonFlag = False,
           live: Annotated[bool, typer.Option(
               "--live", help="runtime=kubernetes: also run the live canary against the cluster in your kubeconfig "
                              "(what `forge k8s check` runs: a sandbox pod, a command, egress blocked, the proxy "
                              "reached, everything removed).")] = False,
           check_harness: Annotated[bool, typer.Option(
               "--check-harness", help="Also run the harness drift guard's live canary (what `forge harness check` "
                                       "runs) against the harness's committed fingerprint.")] = False) -> None:
    """Check each prerequisite of the composed experiment (vLLM, mitmdump, docker daemon or kube
    context, harness bundle, Node; the harness is the version its fingerprint was taken from) and print the exact fix
    for what is missing. Exits 1 if any is."""
    from forge_cli.prerequisites import run_checks

    exp = load(overrides, config_dir).experiment
    if live and exp.runtime.kind != "kubernetes":
        from forge_cli.errors import UserError

        raise UserError(f"--live checks a Kubernetes cluster, and this experiment's runtime is {exp.runtime.kind}",
                        fix="forge doctor runtime=kubernetes --live (or forge k8s check)", exit_code=2)
    checks = run_checks(exp)
    if not as_json:
        from rich.console import Console

        console = Console(highlight=False)
        for c in checks:
            mark = "[green]ok[/]     " if c.ok else "[red]missing[/]"
            console.print(f"{mark} {c.name}: ", end="")
            console.print(c.detail, markup=False)
            if c.fix:
                console.print("          fix: ", end="")
                console.print(c.fix, markup=False)
    canary: dict[str, Any] | None = None
    if live:
        from forge_cli.cli.k8s_cmd import DEFAULT_EGRESS_TARGET, run_check

        canary = run_check(exp, DEFAULT_EGRESS_TARGET, None if as_json else False)
    drift: dict[str, Any] | None = None
    if check_harness:  # the drift guard's live half (the cheap half is a check above)
        from forge_cli.cli.harness_fingerprint_cmd import live_check, report

        kind = exp.runtime.kind
        drift = live_check(exp.harness.name, [f"runtime={kind}"] if kind in ("docker", "local") else [], config_dir)
        if not as_json:
            typer.echo(report(drift))
    if as_json:
        found = [asdict(c) for c in checks]
        extra = {k: v for k, v in (("live", canary), ("harness_check", drift)) if v is not None}
        typer.echo(json.dumps({"checks": found, **extra} if extra else found, indent=2))
    missing = [c.name for c in checks if not c.ok]
    if missing:
        typer.echo(f"error: {len(missing)} prerequisite(s) missing: {', '.join(missing)} (each fix is printed "
                   "above)", err=True)
    if missing or (canary is not None and canary["failed"]) or (drift is not None and drift["changes"]):
        raise typer.Exit(1)
