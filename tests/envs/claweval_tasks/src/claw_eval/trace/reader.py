"""Stand-in load_trace: (start, messages, dispatches, media, end, audit_data)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..models.trace import Event, ToolDispatch, TraceMessage


def load_trace(path: str | Path) -> tuple[Event, list[TraceMessage], list[ToolDispatch], list[Any], Event | None,
                                          dict[str, dict[str, Any]]]:
    start, end, messages, dispatches, audit = None, None, [], [], {}
    for line in Path(path).read_text().splitlines():
        raw = json.loads(line)
        kind = raw["type"]
        if kind == "trace_start":
            start = Event.model_validate(raw)
        elif kind == "message":
            messages.append(TraceMessage.model_validate(raw))
        elif kind == "tool_dispatch":
            dispatches.append(ToolDispatch.model_validate(raw))
        elif kind == "audit_snapshot":
            audit[raw["service_name"]] = raw["audit_data"]
        elif kind == "trace_end":
            end = Event.model_validate(raw)
    if start is None:
        raise ValueError(f"No TraceStart event found in {path}")
    return start, messages, dispatches, [], end, audit
