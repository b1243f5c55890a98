"""A rollout as a Claw-Eval trace: the JSONL its ``trace/reader.py`` ``load_trace`` reads and its graders grade.

Events, as Claw-Eval's runner writes them (``models/trace.py``): ``trace_start``; ``message`` (the task's user
message, then each assistant message and each tool-result message, in Claw-Eval's content blocks: text,
tool_use, tool_result) with token usage; ``tool_dispatch`` (from forge's router: every call of a task tool with
its HTTP status); ``audit_snapshot`` per service; ``trace_end``. The messages come from the proxy's records of the
rollout: the last call's request holds the conversation as the harness last sent it, its response the final
assistant message. Harness prefixes on tool names (``mcp__forge__``, ``forge__``, ``forge_``) are stripped, as
Claw-Eval's graders compare exact tool names.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

from forge_cli.envs.claweval.mock import now

PREFIX = re.compile(r"^(mcp__forge__|forge__|mcp_forge_|forge_)")


def tool_name(name: str) -> str:
    return PREFIX.sub("", name)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict) and block.get("type") in ("text", "input_text", "output_text"):
                parts.append(str(block.get("text") or ""))
            elif isinstance(block, str):
                parts.append(block)
        return "\n".join(parts)
    return "" if content is None else str(content)


def _args(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except (TypeError, ValueError):
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_value": value}


def _chat_message(msg: dict[str, Any]) -> dict[str, Any] | None:
    """One Chat Completions message as a Claw-Eval message (None: system)."""
    role = msg.get("role")
    if role in ("system", "developer"):
        return None
    if role == "tool":
        return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": str(msg.get("tool_call_id") or ""),
                                             "content": [{"type": "text", "text": _text(msg.get("content"))}],
                                             "is_error": False}]}
    blocks: list[dict[str, Any]] = []
    text = _text(msg.get("content"))
    if text:
        blocks.append({"type": "text", "text": text})
    for call in msg.get("tool_calls") or []:
        fn = call.get("function") or {}
        args = _args(fn.get("arguments"))
        if fn.get("name") == "finish" and isinstance(args.get("summary"), str) and not text:
            # a harness that ends with a finish tool (forge-react): its summary is the final answer
            blocks.insert(0, {"type": "text", "text": args["summary"]})
        blocks.append({"type": "tool_use", "id": str(call.get("id") or ""), "name": tool_name(str(fn.get("name"))),
                       "input": _args(fn.get("arguments"))})
    out: dict[str, Any] = {"role": "assistant" if role == "assistant" else "user", "content": blocks}
    if msg.get("reasoning_content"):
        out["reasoning_content"] = str(msg["reasoning_content"])
    return out


def _anthropic_message(msg: dict[str, Any]) -> dict[str, Any]:
    """One Anthropic Messages message as a Claw-Eval message (their blocks are Anthropic's)."""
    content = msg.get("content")
    if isinstance(content, str):
        return {"role": msg.get("role", "user"), "content": [{"type": "text", "text": content}]}
    blocks: list[dict[str, Any]] = []
    for block in content or []:
        kind = block.get("type")
        if kind == "text":
            blocks.append({"type": "text", "text": str(block.get("text") or "")})
        elif kind == "tool_use":
            blocks.append({"type": "tool_use", "id": str(block.get("id") or ""),
                           "name": tool_name(str(block.get("name"))), "input": _args(block.get("input"))})
        elif kind == "tool_result":
            blocks.append({"type": "tool_result", "tool_use_id": str(block.get("tool_use_id") or ""),
                           "content": [{"type": "text", "text": _text(block.get("content"))}],
                           "is_error": bool(block.get("is_error"))})
    return {"role": msg.get("role", "user"), "content": blocks}


def _merge_tool_results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive tool results in one user message, as Claw-Eval's loop writes them."""
    out: list[dict[str, Any]] = []
    for msg in messages:
        is_result = msg["role"] == "user" and msg["content"] and all(
            b["type"] == "tool_result" for b in msg["content"])
        if is_result and out and out[-1]["role"] == "user" and out[-1].get("_results"):
            out[-1]["content"].extend(msg["content"])
            continue
        out.append({**msg, "_results": bool(is_result)})
    return [{k: v for k, v in m.items() if k != "_results"} for m in out]


def conversation(records: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, int]]]:
    """The rollout's messages (Claw-Eval form) with the usage of the call that produced each assistant message."""
    ok = [r for r in records if isinstance(r.get("request"), dict) and isinstance(r.get("response"), dict)]
    if not ok:
        return []
    last = ok[-1]
    request, response = last["request"], last["response"]
    anthropic = "choices" not in response and isinstance(response.get("content"), list)
    raw = list(request.get("messages") or [])
    if anthropic:
        history = [_anthropic_message(m) for m in raw] + [_anthropic_message({"role": "assistant", **response})]
    else:
        choices = response.get("choices") or [{}]
        final = dict(choices[0].get("message") or {"role": "assistant", "content": ""})
        history = [m for m in (_chat_message(x) for x in [*raw, final]) if m is not None]
    history = _merge_tool_results(history)
    usages = [{"input_tokens": int(r.get("prompt_tokens") or 0), "output_tokens": int(r.get("completion_tokens") or 0)}
              for r in ok]
    out, n_assistant, offset = [], sum(1 for m in history if m["role"] == "assistant"), len(usages)
    seen = 0
    for msg in history:
        usage = {"input_tokens": 0, "output_tokens": 0}
        if msg["role"] == "assistant":
            index = offset - (n_assistant - seen)
            seen += 1
            if 0 <= index < offset:
                usage = usages[index]
        out.append((msg, usage))
    return out


def build_trace(task: dict[str, Any], model: str, records: list[dict[str, Any]], dispatches: list[dict[str, Any]],
                audit: dict[str, dict[str, Any]], wall_time_s: float) -> list[dict[str, Any]]:
    """The trace's events (without ``grading_result``, which the grading worker appends)."""
    trace_id = str(uuid.uuid4())
    events: list[dict[str, Any]] = [{"type": "trace_start", "trace_id": trace_id, "task_id": task["task_id"],
                                     "model": model, "persona": "default", "timestamp": now()}]
    messages = conversation(records)
    if not messages or messages[0][0]["role"] != "user":
        prompt = (task.get("prompt") or {}).get("text", "")
        messages.insert(0, ({"role": "user", "content": [{"type": "text", "text": prompt}]},
                            {"input_tokens": 0, "output_tokens": 0}))
    turns = 0
    for msg, usage in messages:
        turns += msg["role"] == "assistant"
        events.append({"type": "message", "trace_id": trace_id, "message": msg, "usage": usage, "timestamp": now()})
    events += [{**d, "trace_id": trace_id} for d in dispatches]
    events += [{"type": "audit_snapshot", "trace_id": trace_id, "service_name": name, "audit_url": snap["url"],
                "audit_data": snap["data"] if isinstance(snap["data"], dict) else {}, "timestamp": now()}
               for name, snap in audit.items()]
    tin = sum(int(r.get("prompt_tokens") or 0) for r in records)
    tout = sum(int(r.get("completion_tokens") or 0) for r in records)
    tool_s = round(sum(float(d.get("latency_ms") or 0) for d in dispatches) / 1000, 2)
    model_s = round(sum(float(r["t_end"]) - float(r["t_start"]) for r in records
                        if r.get("t_end") is not None and r.get("t_start") is not None), 2)
    events.append({"type": "trace_end", "trace_id": trace_id, "total_turns": turns, "model_input_tokens": tin,
                   "model_output_tokens": tout, "input_tokens": tin, "output_tokens": tout,
                   "total_tokens": tin + tout, "model_time_s": model_s, "tool_time_s": tool_s,
                   "other_time_s": round(max(0.0, wall_time_s - model_s - tool_s), 2),
                   "wall_time_s": round(wall_time_s, 2), "failure_modes": [], "timestamp": now()})
    return events


def write_trace(path: Path, events: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for event in events:
            f.write(json.dumps(event, ensure_ascii=False, default=str) + "\n")
