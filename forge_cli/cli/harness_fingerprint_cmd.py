"""``forge harness fingerprint | check``: the harness drift guard (docs/harnesses.md, "Drift guard").

A canary rollout (``forge_cli/testing/harness_canary.py``) records the structure of the harness's requests; the
fingerprint is kept beside the harness config (``configs/harness/<name>.fingerprint.json``) and ``check`` diffs a
fresh one against it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from forge_cli.cli.common import ConfigDir, JsonFlag

HarnessOverrides = Annotated[list[str] | None, typer.Argument(
    help="+harness=NAME, then any overrides of the canary rollout (default runtime=docker), e.g. runtime=local.",
    show_default=False)]


def _say(message: str) -> None:
    typer.echo(message, err=True)


def fingerprint(
    overrides: HarnessOverrides = None,
    write: Annotated[bool, typer.Option("--write", help="Write the fingerprint beside the harness config "
                                                        "(configs/harness/NAME.fingerprint.json), re-pinning it.")
                     ] = False,
    config_dir: ConfigDir = None,
    as_json: JsonFlag = False,
) -> None:
    """Fingerprint a harness's requests from a live canary rollout.

    Records per role (main calls, side calls) the wire format, the system prompt's SHA-256 and length, tool names and
    parameter schemas, the sampling fields it sends, whether its history is append-only, and the number of calls.

    The canary is one builtin train task in a docker sandbox, every call answered by the teacher stand-in through the
    capture proxy. Prints the fingerprint; --write keeps it beside the harness config (the version it was taken from
    recorded in it), which `forge harness check` diffs against.

    Examples: forge harness fingerprint +harness=pi | forge harness fingerprint +harness=codex --write
    """
    from forge_cli.harness.bundles import known_harnesses
    from forge_cli.harness.fingerprint_diff import fingerprint_path, write_fingerprint
    from forge_cli.testing.harness_canary import harness_name, run_canary

    name, rest = harness_name(overrides or [])
    live = run_canary(name, rest, config_dir, _say)
    status = live["canary"].get("status")
    if write and status != "ok":
        from forge_cli.errors import UserError

        raise UserError(f"the canary rollout through {name} ended {status}: its fingerprint is not written",
                        fix=f"forge rollout +harness={name} env.split=train shows why (its logs in the run directory)",
                        exit_code=2)
    if write:
        path = fingerprint_path(known_harnesses(config_dir)[name])
        write_fingerprint(path, live)
        _say(f"written {path} ({name} {live['version']})")
    if as_json or not write:
        typer.echo(json.dumps(live, indent=2))


def _summary(fp: dict[str, Any]) -> str:
    parts = []
    for role, data in (fp.get("roles") or {}).items():
        parts.append(f"{role}: {data.get('calls')} {data.get('wire_format')} call(s), "
                     f"{len(data.get('tools') or {})} tools, system prompt {data['system_prompt']['chars']:,} chars, "
                     f"{'append-only' if data.get('append_only') else 'not append-only'}")
    return "; ".join(parts)


def check(overrides: HarnessOverrides = None, config_dir: ConfigDir = None, as_json: JsonFlag = False) -> None:
    """Diff the live harness's requests against its committed fingerprint.

    Runs the canary again and names each change: a tool or parameter added or removed, the system prompt's length, a
    sampling field, history no longer append-only.

    Exit 0: the same structure (a new version with unchanged requests passes: re-pin it with forge harness
    fingerprint +harness=NAME --write); 1: changes, listed; 2: no fingerprint committed for the harness, or the canary
    could not run. `forge doctor --check-harness` runs it too, and `forge train` before it starts when the harness
    that would run is not the fingerprinted version.
    """
    from forge_cli.testing.harness_canary import harness_name

    name, rest = harness_name(overrides or [])
    result = live_check(name, rest, config_dir)
    if as_json:
        typer.echo(json.dumps(result, indent=2))
    else:
        typer.echo(report(result))
    if result["changes"]:
        raise typer.Exit(1)


def live_check(name: str, overrides: list[str], config_dir: Path | None) -> dict[str, Any]:
    """The canary against the committed fingerprint: {harness, pinned_version, live_version, fingerprint, changes,
    summary}. UserError (exit 2) when there is no fingerprint or the canary cannot run."""
    from forge_cli.errors import UserError
    from forge_cli.harness.fingerprint_diff import diff, pinned_drift
    from forge_cli.testing.harness_canary import run_canary

    path, pinned, drift = pinned_drift(name, config_dir)
    if pinned is None:
        raise UserError(f"harness {name} has no fingerprint ({path} does not exist)",
                        fix=f"forge harness fingerprint +harness={name} --write", exit_code=2)
    if drift:
        _say(drift)
    live = run_canary(name, overrides, config_dir, _say)
    return {"harness": name, "pinned_version": pinned.get("version"), "live_version": live.get("version"),
            "fingerprint": str(path), "changes": diff(pinned, live), "summary": _summary(live)}


def guard_before_train(name: str, config_dir: Path | None, runtime: str, version: str | None = None) -> None:
    """``forge train``'s drift guard: when the harness that would run is not the version its committed fingerprint
    was taken from, run ``forge harness check`` first and refuse (exit 2) a harness whose requests changed; a check
    that cannot run (no docker, say) is a warning. Nothing when the versions match or nothing is fingerprinted.
    ``version``: the experiment's ``harness.package.version`` (a command line may override the config's)."""
    from forge_cli.errors import UserError
    from forge_cli.harness.fingerprint_diff import pinned_drift

    try:
        _, pinned, drift = pinned_drift(name, config_dir, version)
    except (UserError, KeyError):
        return
    if pinned is None or drift is None:
        return
    _say(f"{drift}: running forge harness check +harness={name} before training")
    try:
        result = live_check(name, [f"runtime={runtime}"] if runtime in ("docker", "local") else [], config_dir)
    except UserError as exc:
        _say(f"warning: the harness check could not run ({exc}); training goes on unchecked")
        return
    if result["changes"]:
        raise UserError(f"{report(result)}\nforge train does not train through a harness whose requests changed "
                        "unseen", fix=f"review the changes; if intended: forge harness fingerprint +harness={name} "
                        f"--write, then train again (or pin the harness back to {pinned.get('version')})",
                        exit_code=2)
    _say(report(result))


def report(result: dict[str, Any]) -> str:
    """``live_check``'s result in words."""
    name, changes = result["harness"], result["changes"]
    if changes:
        return "\n".join([f"harness {name}: {len(changes)} change(s) since the fingerprint of "
                           f"{result['pinned_version']} ({result['fingerprint']}); live {result['live_version']}:",
                           *(f"  - {line}" for line in changes),
                           f"if intended: forge harness fingerprint +harness={name} --write (re-pins it)"])
    note = "" if result["live_version"] == result["pinned_version"] else (
        f" (fingerprint taken from {result['pinned_version']}; re-pin with forge harness fingerprint +harness={name} "
        "--write)")
    return f"harness {name} {result['live_version']}: requests unchanged{note}: {result['summary']}"


__all__ = ["check", "fingerprint"]
