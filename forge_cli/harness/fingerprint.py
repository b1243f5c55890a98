"""A harness's fingerprint: the structure of the requests it sends, from a canary rollout's records.

A pure function of the recorded calls (``CallRecord``: the client's request body as the proxy received it), so that
two canary runs of the same harness version give the same fingerprint and an upgrade that changes what the model
is shown (system prompt, tools, sampling fields, history handling) gives another. ``forge harness fingerprint``
takes it and writes it beside the harness config (``configs/harness/<name>.fingerprint.json``); ``forge harness
check`` takes it again and diffs (``forge_cli/harness/fingerprint_diff.py``).

Calls are grouped into **roles** by their shape: the wire format, the client path, the system prompt and the tool
names. The group with the most calls (ties: more tools, then the earliest) is ``main``; the others (title
generation, summaries, a harness's own classifiers) are ``side-1``, ``side-2``... in order of their first call.
Per role it records:

- ``wire_format``, ``path``, ``stream`` and ``calls`` (how many);
- ``system_prompt``: SHA-256 and length of the system text (Chat: the leading ``system``/``developer`` messages;
  Responses: ``instructions`` and the leading ``system``/``developer`` input items; Anthropic: ``system``; Gemini:
  ``systemInstruction``), after normalisation (below);
- ``tools``: per tool name, the SHA-256 of its parameter schema, the schema itself (so that a diff can name the
  parameter that changed) and the SHA-256 of its description;
- ``fields``: every other top-level request field (sampling parameters such as ``temperature``, ``max_tokens``,
  ``reasoning``, ``tool_choice``; client metadata) with its value where it is the same in each call of the role,
  ``"<varies>"`` where it is not;
- ``append_only`` and ``history_breaks``: whether each call's conversation extends the previous call's of the role
  (the previous messages are a prefix of this call's), and the 1-based calls where it does not. Messages are compared
  after dropping ``cache_control`` markers and writing a content list of one text block as a string: both render the
  same prompt, and Claude Code moves its cache markers on every call.

**Normalised** before hashing or comparing (values forge or the sandbox put in per rollout, or the harness draws per
session): the rollout id (``<rollout>``), UUIDs (``<uuid>``), hex strings of 24+ digits such as device ids
(``<hex>``), dates and times (``<date>``, ``<time>``; unix times in milliseconds, ``<timestamp>``), loopback ports
(``127.0.0.1:<port>``) and the paths passed in (a local sandbox's directory, ``<sandbox>``: in docker the workdir is
fixed, ``/work``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from forge_cli.traces.record import CallRecord

FINGERPRINT_SCHEMA = 1
VARIES = "<varies>"

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"), "<uuid>"),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"), "<date>"),
    (re.compile(r"\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*,? (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*"
                r"\.? \d{1,2},? \d{4}\b"), "<date>"),
    (re.compile(r"\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* \d{1,2}, \d{4}\b"), "<date>"),
    (re.compile(r"\b\d{1,2}/\d{1,2}/\d{4}\b"), "<date>"),
    (re.compile(r"\b\d{2}:\d{2}:\d{2}(?:\.\d+)?\b"), "<time>"),
    (re.compile(r"\b[0-9a-fA-F]{24,}\b"), "<hex>"),
    (re.compile(r"\b1[5-9]\d{11}\b"), "<timestamp>"),  # unix time in milliseconds (2017..2033)
    (re.compile(r"\b(127\.0\.0\.1|localhost|host\.docker\.internal|0\.0\.0\.0):\d{2,5}\b"), r"\1:<port>"),
)

# the conversation, the system text and the tools of each wire format: everything else is a "field"
_CONTENT_KEYS: dict[str, frozenset[str]] = {
    "chat": frozenset({"messages", "tools", "model"}),
    "responses": frozenset({"input", "instructions", "tools", "model"}),
    "anthropic": frozenset({"messages", "system", "tools", "model"}),
    "gemini": frozenset({"contents", "systemInstruction", "system_instruction", "tools", "model"}),
}
_SYSTEM_ROLES = ("system", "developer")


def normalise(value: Any, literals: Sequence[tuple[str, str]] = ()) -> Any:
    """``value`` with every string's per-rollout parts replaced by placeholders (the module docstring's list);
    ``literals`` are (regular expression, placeholder) pairs replaced first (the rollout id, a sandbox's paths)."""
    if isinstance(value, str):
        for regex, replacement in literals:
            if len(regex) >= 6:  # a short one would replace parts of words
                value = re.sub(regex, replacement, value)
        for pattern, placeholder in _PATTERNS:
            value = pattern.sub(placeholder, value)
        return value
    if isinstance(value, int) and not isinstance(value, bool) and 1_500_000_000_000 <= value < 2_000_000_000_000:
        return "<timestamp>"  # unix time in milliseconds
    if isinstance(value, list):
        return [normalise(v, literals) for v in value]
    if isinstance(value, dict):
        return {k: normalise(v, literals) for k, v in value.items()}
    return value


def sha256(value: Any) -> str:
    """SHA-256 of a string, or of a JSON value written canonically (sorted keys, no spaces)."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        return _text(content.get("parts") or content.get("text") or content.get("content") or "")
    if isinstance(content, list):
        return "\n".join(_text(p) for p in content)
    return ""


def conversation(wire_format: str, body: dict[str, Any]) -> list[Any]:
    """The request's conversation items (system items included where the wire format keeps them there)."""
    key = {"responses": "input", "gemini": "contents"}.get(wire_format, "messages")
    items = body.get(key)
    if isinstance(items, str):  # Responses: a bare string input is one user message
        return [{"role": "user", "content": items}]
    return list(items) if isinstance(items, list) else []


def system_text(wire_format: str, body: dict[str, Any]) -> str:
    """The system prompt as the model reads it (module docstring: where each wire format keeps it)."""
    parts: list[str] = []
    if wire_format == "anthropic":
        parts.append(_text(body.get("system")))
    elif wire_format == "gemini":
        parts.append(_text(body.get("systemInstruction") or body.get("system_instruction")))
    else:
        if wire_format == "responses" and body.get("instructions"):
            parts.append(_text(body.get("instructions")))
        for item in conversation(wire_format, body):
            if not (isinstance(item, dict) and item.get("role") in _SYSTEM_ROLES):
                break
            parts.append(_text(item.get("content")))
    return "\n".join(p for p in parts if p)


def tools(wire_format: str, body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Tool name -> {"schema": parameter schema, "description": text} of the tools the request declares."""
    out: dict[str, dict[str, Any]] = {}
    declared = body.get("tools") or []
    if wire_format == "gemini":
        declared = [f for t in declared if isinstance(t, dict) for f in (t.get("functionDeclarations")
                                                                          or t.get("function_declarations") or [])]
    for tool in declared:
        if not isinstance(tool, dict):
            continue
        spec: dict[str, Any] = tool["function"] if isinstance(tool.get("function"), dict) else tool
        name = str(spec.get("name") or tool.get("type") or "?")
        schema = spec.get("parameters", spec.get("input_schema", spec.get("parametersJsonSchema")))
        if schema is None:  # a hosted tool ({"type": "web_search", ...}): its settings are its schema
            schema = {k: v for k, v in spec.items() if k not in ("name", "description")}
        out[name] = {"schema": schema, "description": str(spec.get("description") or "")}
    return out


def _canonical_item(item: Any) -> Any:
    """A conversation item as the prompt renders it: no cache markers, a lone text block as a string."""
    if isinstance(item, dict):
        item = {k: _canonical_item(v) for k, v in item.items() if k != "cache_control"}
        content = item.get("content")
        if (isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict)
                and content[0].get("type") in ("text", "input_text") and set(content[0]) <= {"type", "text"}):
            item["content"] = content[0].get("text")
        return item
    if isinstance(item, list):
        return [_canonical_item(v) for v in item]
    return item


def _role_key(call: dict[str, Any]) -> tuple[str, str, str, tuple[str, ...]]:
    return call["wire_format"], call["path"], call["system_sha256"], tuple(call["tools"])


def _call_view(record: CallRecord, literals: Sequence[tuple[str, str]]) -> dict[str, Any] | None:
    """What the fingerprint keeps of one call (None: a body that is not a JSON object)."""
    if not isinstance(record.request, dict):
        return None
    wire = record.wire_format
    body = normalise(record.request, [(re.escape(record.rollout_id), "<rollout>"), *literals])
    system = system_text(wire, body)
    content_keys = _CONTENT_KEYS.get(wire, _CONTENT_KEYS["chat"])
    return {"wire_format": wire, "path": (record.path or "").split("?")[0], "stream": bool(record.stream),
            "system": system, "system_sha256": sha256(system), "tools": tools(wire, body),
            "fields": {k: v for k, v in body.items() if k not in content_keys},
            "history": [_canonical_item(i) for i in conversation(wire, body)]}


def _fields(calls: list[dict[str, Any]]) -> dict[str, Any]:
    names = sorted({name for c in calls for name in c["fields"]})
    out: dict[str, Any] = {}
    for name in names:
        values = [json.dumps(c["fields"].get(name, VARIES), sort_keys=True) for c in calls]
        out[name] = calls[0]["fields"][name] if len(set(values)) == 1 else VARIES
    return out


def _breaks(calls: list[dict[str, Any]]) -> list[int]:
    """1-based indexes (within the role) of calls whose history does not extend the previous call's."""
    out = []
    for i in range(1, len(calls)):
        before, now = calls[i - 1]["history"], calls[i]["history"]
        if len(now) < len(before) or now[:len(before)] != before:
            out.append(i + 1)
    return out


def _role(calls: list[dict[str, Any]]) -> dict[str, Any]:
    first = calls[0]
    breaks = _breaks(calls)
    return {
        "wire_format": first["wire_format"], "path": first["path"],
        "stream": first["stream"] if len({c["stream"] for c in calls}) == 1 else VARIES,
        "calls": len(calls),
        "system_prompt": {"sha256": first["system_sha256"], "chars": len(first["system"])},
        "tools": {name: {"schema_sha256": sha256(t["schema"]), "description_sha256": sha256(t["description"]),
                         "schema": t["schema"]} for name, t in sorted(first["tools"].items())},
        "fields": _fields(calls),
        "append_only": not breaks, "history_breaks": breaks,
    }


def fingerprint(records: Iterable[CallRecord], *, harness: str, version: str,
                literals: Sequence[tuple[str, str]] = (), canary: dict[str, Any] | None = None) -> dict[str, Any]:
    """The fingerprint of one canary rollout's calls (in ``seq`` order) of harness ``harness`` at ``version``.
    ``literals``: (regular expression, placeholder) pairs normalised before the built-in patterns; ``canary``: how
    the calls were taken (task, runtime), recorded as is."""
    ordered = sorted(records, key=lambda r: (r.seq, r.id or 0))
    views = [v for v in (_call_view(r, literals) for r in ordered) if v is not None]
    groups: dict[tuple[str, str, str, tuple[str, ...]], list[dict[str, Any]]] = {}
    for view in views:
        groups.setdefault(_role_key(view), []).append(view)
    order = list(groups)  # by first call
    main = max(order, key=lambda k: (len(groups[k]), len(k[3]), -order.index(k))) if order else None
    roles: dict[str, Any] = {}
    if main is not None:
        roles["main"] = _role(groups[main])
    for n, key in enumerate((k for k in order if k != main), start=1):
        roles[f"side-{n}"] = _role(groups[key])
    return {"schema": FINGERPRINT_SCHEMA, "harness": harness, "version": version, "canary": canary or {},
            "calls": len(views), "roles": roles}
