"""forge's own in-process demo services behind ``backend: {kind: builtin}``: state is per rollout.

``mailbox`` resembles Claw-Eval's mail service: ``list_inbox``, ``read_email``, ``send_email``. A task seeds it
through ``tool_state: {mailbox: {inbox: [...]}}`` and its verifier reads the final state (sent mail).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any


class ToolError(Exception):
    """A tool call that failed in a way the agent should see (an MCP tool error, ``is_error`` over REST)."""


class Mailbox:
    """A per-rollout mailbox: an inbox seeded by the task, and the mail the agent sends."""

    def __init__(self, seed: dict[str, Any] | None = None) -> None:
        seed = copy.deepcopy(seed or {})
        self.inbox: list[dict[str, Any]] = [
            {"id": str(m.get("id", i + 1)), "from": m.get("from", ""), "subject": m.get("subject", ""),
             "body": m.get("body", ""), "read": bool(m.get("read", False))}
            for i, m in enumerate(seed.get("inbox") or [])
        ]
        self.sent: list[dict[str, Any]] = []

    def call(self, tool: str, args: dict[str, Any]) -> Any:
        ops: dict[str, Callable[[dict[str, Any]], Any]] = {
            "list_inbox": self._list, "read_email": self._read, "send_email": self._send}
        if tool not in ops:
            raise ToolError(f"the mailbox service has no operation '{tool}' (has: {', '.join(ops)})")
        return ops[tool](args)

    def _list(self, args: dict[str, Any]) -> Any:
        unread_only = bool(args.get("unread_only", False))
        return [{k: m[k] for k in ("id", "from", "subject", "read")} for m in self.inbox
                if not (unread_only and m["read"])]

    def _read(self, args: dict[str, Any]) -> Any:
        wanted = str(args.get("id", ""))
        for mail in self.inbox:
            if mail["id"] == wanted:
                mail["read"] = True
                return dict(mail)
        raise ToolError(f"no email with id '{wanted}' (list_inbox shows the ids)")

    def _send(self, args: dict[str, Any]) -> Any:
        to, subject, body = (str(args.get(k, "")).strip() for k in ("to", "subject", "body"))
        if "@" not in to:
            raise ToolError(f"'{to}' is not an email address")
        mail = {"id": f"sent-{len(self.sent) + 1}", "to": to, "subject": subject, "body": body}
        self.sent.append(mail)
        return {"id": mail["id"], "status": "sent"}

    def snapshot(self) -> dict[str, Any]:
        return {"inbox": copy.deepcopy(self.inbox), "sent": copy.deepcopy(self.sent)}


# service name -> factory taking the task's seed for it
SERVICES: dict[str, Callable[[dict[str, Any] | None], Mailbox]] = {"mailbox": Mailbox}
