"""What changed between two harness fingerprints (``forge_cli/harness/fingerprint.py``), in words; where the
committed fingerprint lives; and whether the installed harness is the version it was taken from.

``diff(pinned, live)`` lists each change as one line, e.g. ``main: tool `bash`: parameter `timeout` added``,
``main: system prompt changed: 1,450 -> 1,602 chars``, ``main: history no longer append-only at call 3``. The
harness version, the canary's settings and the schema number are not compared (the canary rollout's status is): a
new version whose requests are unchanged passes (and can be re-pinned to record the version).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from forge_cli.harness.bundles import installed_bundles, known_harnesses, load_harness, read_manifest
from forge_cli.harness.installer import installer_class

SUFFIX = ".fingerprint.json"


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _value_changes(before: Any, after: Any, where: str = "") -> list[tuple[str, Any, Any]]:
    """(path, before, after) of each differing leaf of two JSON values (dicts compared key by key)."""
    if isinstance(before, dict) and isinstance(after, dict):
        out: list[tuple[str, Any, Any]] = []
        for key in sorted(set(before) | set(after)):
            if before.get(key) != after.get(key):
                out += _value_changes(before.get(key), after.get(key), f"{where}.{key}")
        return out
    return [(where, before, after)]


def _keyed(before: dict[str, Any], after: dict[str, Any], added: Callable[[str], str],
           removed: Callable[[str], str], changed: Callable[[str], list[str]]) -> list[str]:
    """The lines of two name-keyed maps: ``added(name)``, ``removed(name)``, ``changed(name)`` (where they differ)."""
    out: list[str] = []
    for name in sorted(set(before) | set(after)):
        if name not in before:
            out.append(added(name))
        elif name not in after:
            out.append(removed(name))
        elif before[name] != after[name]:
            out += changed(name)
    return out


def _parameter_change(prefix: str, name: str, before: Any, after: Any) -> list[str]:
    if not (isinstance(before, dict) and isinstance(after, dict)):
        return [f"{prefix}: parameter `{name}` changed ({_short(before)} -> {_short(after)})"]
    details = ", ".join(f"{k} {_short(before.get(k))} -> {_short(after.get(k))}" if k in ("type", "enum", "default")
                        else f"{k} changed" for k in sorted(set(before) | set(after)) if before.get(k) != after.get(k))
    return [f"{prefix}: parameter `{name}` changed ({details})"]


def _schema_changes(prefix: str, before: Any, after: Any) -> list[str]:
    """A tool's parameter schema, parameter by parameter where both are object schemas."""
    if not (isinstance(before, dict) and isinstance(after, dict)):
        return [f"{prefix}: parameter schema changed: {_short(before)} -> {_short(after)}"]
    props_before, props_after = before.get("properties") or {}, after.get("properties") or {}
    out = _keyed(props_before, props_after,
                 lambda n: f"{prefix}: parameter `{n}` added ({_short(props_after[n])})",
                 lambda n: f"{prefix}: parameter `{n}` removed",
                 lambda n: _parameter_change(prefix, n, props_before[n], props_after[n]))
    for key in sorted((set(before) | set(after)) - {"properties"}):
        if before.get(key) != after.get(key):
            out.append(f"{prefix}: schema `{key}` {_short(before.get(key))} -> {_short(after.get(key))}")
    return out


def _tool_change(prefix: str, before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    out = []
    if before.get("schema_sha256") != after.get("schema_sha256"):
        out += _schema_changes(prefix, before.get("schema"), after.get("schema"))
    if before.get("description_sha256") != after.get("description_sha256"):
        out.append(f"{prefix}: description changed")
    return out


def _history_changes(role: str, before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    def calls(fp: dict[str, Any]) -> str:
        return ", ".join(str(c) for c in fp.get("history_breaks") or [])

    if before.get("append_only") and not after.get("append_only"):
        return [f"{role}: history no longer append-only at call {calls(after)}"]
    if not before.get("append_only") and after.get("append_only"):
        return [f"{role}: history now append-only (was not at call {calls(before)})"]
    if before.get("history_breaks") != after.get("history_breaks"):
        return [f"{role}: history not append-only at call {calls(after)} (was at call {calls(before)})"]
    return []


def _role_changes(role: str, before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key in ("wire_format", "path", "stream", "calls"):
        if before.get(key) != after.get(key):
            out.append(f"{role}: {key.replace('_', ' ')} {before.get(key)} -> {after.get(key)}")
    sp_before, sp_after = before.get("system_prompt") or {}, after.get("system_prompt") or {}
    if sp_before.get("sha256") != sp_after.get("sha256"):
        out.append(f"{role}: system prompt changed: {sp_before.get('chars', 0):,} -> {sp_after.get('chars', 0):,} "
                   f"chars (sha256 {str(sp_before.get('sha256'))[:12]} -> {str(sp_after.get('sha256'))[:12]})")
    tools_before, tools_after = before.get("tools") or {}, after.get("tools") or {}
    out += _keyed(tools_before, tools_after, lambda n: f"{role}: tool `{n}` added",
                  lambda n: f"{role}: tool `{n}` removed",
                  lambda n: _tool_change(f"{role}: tool `{n}`", tools_before[n], tools_after[n]))
    if list(tools_before) != list(tools_after) and set(tools_before) == set(tools_after):
        out.append(f"{role}: tools reordered: {', '.join(tools_before)} -> {', '.join(tools_after)}")
    fields_before, fields_after = before.get("fields") or {}, after.get("fields") or {}
    out += _keyed(fields_before, fields_after, lambda n: f"{role}: field `{n}` added ({_short(fields_after[n])})",
                  lambda n: f"{role}: field `{n}` no longer sent (was {_short(fields_before[n])})",
                  lambda n: [f"{role}: field `{n}`{where}: {_short(a)} -> {_short(b)}"
                             for where, a, b in _value_changes(fields_before[n], fields_after[n])])
    return out + _history_changes(role, before, after)


def diff(pinned: dict[str, Any], live: dict[str, Any]) -> list[str]:
    """Each change from ``pinned`` to ``live``, one readable line each (empty: the same structure)."""
    out: list[str] = []
    status_before, status_after = (fp.get("canary", {}).get("status") for fp in (pinned, live))
    if status_before and status_after and status_before != status_after:
        out.append(f"canary rollout {status_before} -> {status_after}")
    if pinned.get("calls") != live.get("calls"):
        out.append(f"calls per canary rollout: {pinned.get('calls')} -> {live.get('calls')}")
    roles_before, roles_after = pinned.get("roles") or {}, live.get("roles") or {}
    for role in [*roles_before, *(r for r in roles_after if r not in roles_before)]:
        if role not in roles_after:
            gone = roles_before[role]
            out.append(f"{role} calls no longer made ({gone.get('calls')} {gone.get('wire_format')} call(s) to "
                       f"{gone.get('path')})")
        elif role not in roles_before:
            new = roles_after[role]
            out.append(f"{role} calls added ({new.get('calls')} {new.get('wire_format')} call(s) to {new.get('path')},"
                       f" {len(new.get('tools') or {})} tools)")
        else:
            out += _role_changes(role, roles_before[role], roles_after[role])
    return out


# ---------------------------------------------------------------- the committed file
def fingerprint_path(config: Path) -> Path:
    """Where the fingerprint of the harness config ``config`` (``.../harness/<name>.yaml``) is kept."""
    return config.with_name(config.stem + SUFFIX)


def read_fingerprint(path: Path) -> dict[str, Any] | None:
    """The fingerprint in ``path`` (None: no such file, or not a JSON object)."""
    return read_manifest(path)


def write_fingerprint(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=False, ensure_ascii=False) + "\n")


def version_drift(name: str, pinned_version: str | None, fingerprint_version: str | None,
                  installed_version: str | None) -> str | None:
    """Why the harness that would run is not the one fingerprinted (None: it is): the installed bundle's version
    (None: not installed, or a builtin or user-provided harness) or the config's pinned one differs from the
    fingerprint's."""
    if fingerprint_version is None:
        return None
    for version, where in ((installed_version, "installed"), (pinned_version, "pinned")):
        if version is not None and version != fingerprint_version:
            return (f"harness {name} {version} ({where}) is not the version its fingerprint was taken from "
                    f"({fingerprint_version})")
    return None


def installed_version(name: str, config_dir: Path | None = None) -> tuple[str | None, str | None]:
    """(the config's pinned version, the installed bundle's version or None: not installed, builtin or binary)."""
    harness = load_harness(name, config_dir)
    installer = installer_class(harness.package.manager)
    if installer.ships_with_forge or installer.user_provided:
        return harness.package.version, None
    found = next((b for b in installed_bundles() if b.get("name") == name), None)
    return harness.package.version, (str(found.get("version")) if found else None)


def pinned_drift(name: str, config_dir: Path | None = None, pinned_version: str | None = None
                 ) -> tuple[Path, dict[str, Any] | None, str | None]:
    """The cheap half of ``forge harness check`` (no canary): (the fingerprint's path, its content or None when
    there is none, why the harness that would run is not the fingerprinted version or None). ``pinned_version``: the
    composed experiment's ``harness.package.version`` where a command line overrides the config file's."""
    version, installed = installed_version(name, config_dir)  # an unknown name: UserError listing the known ones
    path = fingerprint_path(known_harnesses(config_dir)[name])
    pinned = read_fingerprint(path)
    if pinned is None:
        return path, None, None
    return path, pinned, version_drift(name, pinned_version or version, pinned.get("version"), installed)
