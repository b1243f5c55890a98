"""What changed between two harness fingerprints (``forge_cli/harness/fingerprint.py``), in words; where the
committed fingerprint lives; and whether the installed harness is the version it was taken from.

``diff(pinned, live)`` lists each change as one line, e.g. ``main: tool `bash`: parameter `timeout` added``,
``main: system prompt changed: 1,450 -> 1,602 chars``, ``main: history no longer append-only at call 3``. The
harness version, the canary's settings and the schema number are not compared: a new version whose requests are
unchanged passes (and can be re-pinned to record the version).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


def _schema_changes(prefix: str, before: Any, after: Any) -> list[str]:
    """A tool's parameter schema, parameter by parameter where both are object schemas."""
    if not (isinstance(before, dict) and isinstance(after, dict)):
        return [f"{prefix}: parameter schema changed: {_short(before)} -> {_short(after)}"]
    out: list[str] = []
    props_before = before.get("properties") or {}
    props_after = after.get("properties") or {}
    for name in sorted(set(props_before) | set(props_after)):
        if name not in props_before:
            out.append(f"{prefix}: parameter `{name}` added ({_short(props_after[name])})")
        elif name not in props_after:
            out.append(f"{prefix}: parameter `{name}` removed")
        elif props_before[name] != props_after[name]:
            changed = sorted(k for k in set(props_before[name]) | set(props_after[name])
                             if props_before[name].get(k) != props_after[name].get(k)) \
                if isinstance(props_before[name], dict) and isinstance(props_after[name], dict) else ["schema"]
            details = ", ".join(
                f"{k} {_short(props_before[name].get(k))} -> {_short(props_after[name].get(k))}"
                if k in ("type", "enum", "default") else f"{k} changed" for k in changed)
            out.append(f"{prefix}: parameter `{name}` changed ({details})")
    for key in sorted((set(before) | set(after)) - {"properties"}):
        if before.get(key) != after.get(key):
            out.append(f"{prefix}: schema `{key}` {_short(before.get(key))} -> {_short(after.get(key))}")
    return out


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
    for name in sorted(set(tools_before) | set(tools_after)):
        if name not in tools_before:
            out.append(f"{role}: tool `{name}` added")
        elif name not in tools_after:
            out.append(f"{role}: tool `{name}` removed")
        else:
            if tools_before[name].get("schema_sha256") != tools_after[name].get("schema_sha256"):
                out += _schema_changes(f"{role}: tool `{name}`", tools_before[name].get("schema"),
                                       tools_after[name].get("schema"))
            if tools_before[name].get("description_sha256") != tools_after[name].get("description_sha256"):
                out.append(f"{role}: tool `{name}`: description changed")
    if list(tools_before) != list(tools_after) and set(tools_before) == set(tools_after):
        out.append(f"{role}: tools reordered: {', '.join(tools_before)} -> {', '.join(tools_after)}")
    fields_before, fields_after = before.get("fields") or {}, after.get("fields") or {}
    for name in sorted(set(fields_before) | set(fields_after)):
        if name not in fields_before:
            out.append(f"{role}: field `{name}` added ({_short(fields_after[name])})")
        elif name not in fields_after:
            out.append(f"{role}: field `{name}` no longer sent (was {_short(fields_before[name])})")
        elif fields_before[name] != fields_after[name]:
            out += [f"{role}: field `{name}`{where}: {_short(a)} -> {_short(b)}"
                    for where, a, b in _value_changes(fields_before[name], fields_after[name])]
    if before.get("append_only") and not after.get("append_only"):
        calls = ", ".join(str(c) for c in after.get("history_breaks") or [])
        out.append(f"{role}: history no longer append-only at call {calls}")
    elif not before.get("append_only") and after.get("append_only"):
        out.append(f"{role}: history now append-only (was not at call "
                   f"{', '.join(str(c) for c in before.get('history_breaks') or [])})")
    elif before.get("history_breaks") != after.get("history_breaks"):
        out.append(f"{role}: history breaks at call {before.get('history_breaks')} -> {after.get('history_breaks')}")
    return out


def diff(pinned: dict[str, Any], live: dict[str, Any]) -> list[str]:
    """Each change from ``pinned`` to ``live``, one readable line each (empty: the same structure)."""
    out: list[str] = []
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
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


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
    from forge_cli.harness.bundles import installed_bundles, load_harness

    harness = load_harness(name, config_dir)
    if harness.package.manager in ("builtin", "binary"):
        return harness.package.version, None
    found = next((b for b in installed_bundles() if b.get("name") == name), None)
    return harness.package.version, (str(found.get("version")) if found else None)


def pinned_drift(name: str, config_dir: Path | None = None) -> tuple[Path, dict[str, Any] | None, str | None]:
    """The cheap half of ``forge harness check`` (no canary): (the fingerprint's path, its content or None when
    there is none, why the harness that would run is not the fingerprinted version or None)."""
    from forge_cli.harness.bundles import known_harnesses

    version, installed = installed_version(name, config_dir)  # an unknown name: UserError listing the known ones
    path = fingerprint_path(known_harnesses(config_dir)[name])
    pinned = read_fingerprint(path)
    if pinned is None:
        return path, None, None
    return path, pinned, version_drift(name, version, pinned.get("version"), installed)
