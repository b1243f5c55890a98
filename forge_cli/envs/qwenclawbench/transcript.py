"""A rollout's recorded model calls as OpenClaw's session JSONL, the transcript QwenClawBench's graders read.

QwenClawBench grades ``grade(transcript, workspace_path)`` where ``transcript`` is the list of entries of the
OpenClaw session file (``~/.openclaw/agents/<agent>/sessions/<id>.jsonl``): a ``{"type": "session"}`` header, then
``{"type": "message", "message": {...}}`` entries whose message is a ``user`` turn (``content``: text parts), an
``assistant`` turn (``content``: ``text`` / ``thinking`` / ``toolCall {id, name, arguments}`` parts, ``usage``,
``stopReason``) or a ``toolResult`` (``toolCallId``, ``toolName``, ``content``, ``isError``).

For OpenClaw the native session file is used when the sandbox still holds it (the verifier looks for it); for every
other harness the conversation is rebuilt from the proxy's records: the recorded call with the longest
conversation (the latest on ties) gives the history, its response the last assistant turn. Chat Completions,
Anthropic Messages and OpenAI Responses calls are understood; tool names stay the harness's own (react's ``bash``
is not renamed OpenClaw's ``exec``), so a grader that looks for a specific OpenClaw tool name sees the harness's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

Entry = dict[str, Any]


def _args(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError:
            return raw
    return raw if raw is not None else {}


def _text(content: Any) -> str:
    """Plain text of a content field that is a string or a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) if isinstance(p, Mapping) else str(p) for p in content)
    return "" if content is None else str(content)


def _history(call: Mapping[str, Any]) -> list[Any]:
    request = call.get("request")
    if not isinstance(request, Mapping):
        return []
    items = request.get("messages", request.get("input"))
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    return list(items) if isinstance(items, list) else []


def _chat(messages: list[Any], response: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    choices = response.get("choices") if isinstance(response, Mapping) else None
    final = [dict(choices[0].get("message") or {}, _stop=choices[0].get("finish_reason"))] if choices else []
    for msg in [*messages, *final]:
        if not isinstance(msg, Mapping):
            continue
        role = msg.get("role")
        if role == "user":
            out.append({"role": "user", "content": [{"type": "text", "text": _text(msg.get("content"))}]})
        elif role == "assistant":
            parts: list[dict[str, Any]] = []
            reasoning = msg.get("reasoning_content") or msg.get("reasoning")
            if reasoning:
                parts.append({"type": "thinking", "thinking": str(reasoning)})
            if _text(msg.get("content")):
                parts.append({"type": "text", "text": _text(msg.get("content"))})
            for tc in msg.get("tool_calls") or []:
                fn = tc.get("function") or {}
                names[str(tc.get("id"))] = str(fn.get("name", ""))
                parts.append({"type": "toolCall", "id": tc.get("id"), "name": fn.get("name"),
                              "arguments": _args(fn.get("arguments"))})
            stop = "toolUse" if msg.get("tool_calls") else "stop"
            out.append({"role": "assistant", "content": parts, "stopReason": stop})
        elif role == "tool":
            cid = str(msg.get("tool_call_id"))
            out.append({"role": "toolResult", "toolCallId": cid, "toolName": names.get(cid, ""),
                        "content": [{"type": "text", "text": _text(msg.get("content"))}], "isError": False})
    return out


def _anthropic(messages: list[Any], response: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    final = [{"role": "assistant", "content": response.get("content")}] if isinstance(response, Mapping) else []
    for msg in [*messages, *final]:
        if not isinstance(msg, Mapping):
            continue
        content = msg.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        if msg.get("role") == "user":
            texts = [b for b in blocks if b.get("type") == "text"]
            for b in blocks:
                if b.get("type") == "tool_result":
                    cid = str(b.get("tool_use_id"))
                    out.append({"role": "toolResult", "toolCallId": cid, "toolName": names.get(cid, ""),
                                "content": [{"type": "text", "text": _text(b.get("content"))}],
                                "isError": bool(b.get("is_error"))})
            if texts:
                out.append({"role": "user", "content": [{"type": "text", "text": _text(texts)}]})
        elif msg.get("role") == "assistant":
            parts: list[dict[str, Any]] = []
            for b in blocks:
                if b.get("type") == "text":
                    parts.append({"type": "text", "text": b.get("text", "")})
                elif b.get("type") == "thinking":
                    parts.append({"type": "thinking", "thinking": b.get("thinking", "")})
                elif b.get("type") == "tool_use":
                    names[str(b.get("id"))] = str(b.get("name", ""))
                    parts.append({"type": "toolCall", "id": b.get("id"), "name": b.get("name"),
                                  "arguments": b.get("input") or {}})
            uses = any(p["type"] == "toolCall" for p in parts)
            out.append({"role": "assistant", "content": parts, "stopReason": "toolUse" if uses else "stop"})
    return out


def _responses(items: list[Any], response: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    final = list(response.get("output") or []) if isinstance(response, Mapping) else []
    pending: list[dict[str, Any]] = []

    def flush() -> None:
        if pending:
            uses = any(p["type"] == "toolCall" for p in pending)
            out.append({"role": "assistant", "content": list(pending), "stopReason": "toolUse" if uses else "stop"})
            pending.clear()

    for item in [*items, *final]:
        if not isinstance(item, Mapping):
            continue
        kind, role = item.get("type", "message"), item.get("role")
        if kind == "message" and role == "assistant":
            pending.append({"type": "text", "text": _text(item.get("content"))})
        elif kind == "reasoning":
            pending.append({"type": "thinking", "thinking": _text(item.get("summary"))})
        elif kind == "function_call":
            names[str(item.get("call_id"))] = str(item.get("name", ""))
            pending.append({"type": "toolCall", "id": item.get("call_id"), "name": item.get("name"),
                            "arguments": _args(item.get("arguments"))})
        elif kind == "function_call_output":
            flush()
            cid = str(item.get("call_id"))
            out.append({"role": "toolResult", "toolCallId": cid, "toolName": names.get(cid, ""),
                        "content": [{"type": "text", "text": _text(item.get("output"))}], "isError": False})
        elif kind == "message" and role == "user":
            flush()
            out.append({"role": "user", "content": [{"type": "text", "text": _text(item.get("content"))}]})
    flush()
    return out


CONVERTERS = {"chat": _chat, "anthropic": _anthropic, "responses": _responses}


def from_records(records: Iterable[Mapping[str, Any]], session_id: str, cwd: str = "") -> list[Entry]:
    """OpenClaw session entries rebuilt from a rollout's call records (CallRecord dicts)."""
    calls = [c for c in records if c.get("status") == "ok" and c.get("wire_format") in CONVERTERS]
    entries: list[Entry] = [{"type": "session", "version": 3, "id": session_id, "cwd": cwd,
                             "source": "forge: converted from the proxy's records"}]
    if not calls:
        return entries
    chosen = max(enumerate(calls), key=lambda ic: (len(_history(ic[1])), ic[0]))[1]
    messages = CONVERTERS[str(chosen["wire_format"])](_history(chosen), chosen.get("response"))
    assistants = [m for m in messages if m["role"] == "assistant"]
    # the i-th assistant turn was answered by the i-th call of the conversation when their numbers agree
    if len(assistants) == len(calls):
        for msg, call in zip(assistants, calls, strict=True):
            prompt, completion = int(call.get("prompt_tokens") or 0), int(call.get("completion_tokens") or 0)
            msg["usage"] = {"input": prompt, "output": completion, "totalTokens": prompt + completion}
            msg["model"] = call.get("model")
    parent = None
    for i, msg in enumerate(messages):
        entry_id = f"m{i:04d}"
        entries.append({"type": "message", "id": entry_id, "parentId": parent, "message": msg})
        parent = entry_id
    return entries


def parse_jsonl(text: str) -> list[Entry]:
    """A session file's entries as QwenClawBench's runner reads them (a bad line becomes a parse_error entry)."""
    entries: list[Entry] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError as exc:
            entries.append({"parse_error": str(exc), "skipped": True})
    return entries


def to_jsonl(entries: Iterable[Entry]) -> str:
    return "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries)
