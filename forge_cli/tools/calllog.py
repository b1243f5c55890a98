"""Each tool dispatch of a rollout, appended and fsynced to ``<run dir>/rollouts/<id>/tool_calls.jsonl``."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

Transport = Literal["mcp", "rest"]


@dataclass(frozen=True)
class ToolCall:
    seq: int
    tool: str
    arguments: Any
    result: Any
    is_error: bool
    transport: Transport
    # wall-clock seconds since the epoch
    t_start: float
    t_end: float


class ToolCallLog:
    """Durable, ordered record of one rollout's dispatches (kept in memory too, for the verifier and result)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.calls: list[ToolCall] = []
        self._lock = threading.Lock()
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, tool: str, arguments: Any, result: Any, is_error: bool, transport: Transport,
               t_start: float, t_end: float) -> ToolCall:
        with self._lock:
            call = ToolCall(len(self.calls), tool, arguments, result, is_error, transport, t_start, t_end)
            if self.path is not None:
                line = json.dumps(asdict(call), default=str) + "\n"
                with self.path.open("a", encoding="utf-8") as f:
                    f.write(line)
                    f.flush()
                    os.fsync(f.fileno())
            self.calls.append(call)
            return call

    def records(self) -> list[dict[str, Any]]:
        with self._lock:
            return [asdict(c) for c in self.calls]
