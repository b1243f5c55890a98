"""Tool sessions: a tool backend that lives for one rollout (started before the harness, its state read by the
verifier, closed after it), such as the rollout's own browser or desktop.

A task's tool names one with ``backend: {kind: <name>}``; the rollout's ``tool_state.<name>`` is its setup. To add
one, subclass :class:`ToolSession` with ``kind="<name>"`` in a module forge finds (``forge_cli/<pkg>/tool_session.py``
for forge's own, the entry-point group ``forge.tool_sessions`` for a package's, ``pkg.module:Class`` as the kind
for a user's own; :mod:`forge_cli.plugins`). ``forge_cli.testing.tool_session`` is the conformance kit a session
passes. The browser (``forge_cli/browser/tool_session.py``) and the desktop (``forge_cli/desktop/tool_session.py``)
are forge's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from forge_cli.plugins import Registry


@dataclass(frozen=True)
class Outcome:
    """What a dispatch returned: a JSON value, and whether it is a tool error the agent should see."""

    result: Any
    is_error: bool = False
    # images beside the result (media type, base64): MCP clients get them as image content
    images: tuple[tuple[str, str], ...] = ()


class ToolSession:
    """One rollout's instance of a tool backend that has a lifetime.

    Made with the task's ``tool_state.<kind>`` (``setup``), the directory for the rollout's logs (None: keep none)
    and the rollout id. :meth:`start` runs before the harness (raising: the rollout is an infra error),
    :meth:`call` once per tool call of this kind (a tool error is an ``Outcome`` with ``is_error``, never an
    exception the agent cannot see), :meth:`state` after the harness for the verifier (``services.<kind>``), and
    :meth:`close` always, once, also after a failed start.
    """

    kind: ClassVar[str] = ""
    # seconds its start (and its state, for the verifier) may take beyond the tool server's own on a loaded machine
    start_s: ClassVar[float] = 0.0
    state_s: ClassVar[float] = 0.0

    def __init_subclass__(cls, kind: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if kind:
            cls.kind = kind
            TOOL_SESSIONS.add(kind, cls)

    def __init__(self, setup: dict[str, Any], log_dir: Path | None, rollout_id: str) -> None:
        self.setup, self.log_dir, self.rollout_id = setup, log_dir, rollout_id

    async def start(self) -> None:
        """Bring the backend up for this rollout (before the harness starts)."""

    async def call(self, name: str, arguments: dict[str, Any]) -> Outcome:
        """Run tool ``name`` (already validated against its input schema) and return what the agent sees."""
        raise NotImplementedError

    async def state(self) -> dict[str, Any]:
        """What the verifier reads as ``services.<kind>`` (JSON-serialisable)."""
        return {}

    async def close(self) -> None:
        """Release everything :meth:`start` took (idempotent; runs after a failed start too)."""


TOOL_SESSIONS: Registry[type[ToolSession]] = Registry("tool session", ToolSession, "forge.tool_sessions",
                                                      own="*/tool_session.py")

# the backend kinds every tool server has (not sessions): a session may not take these names
FIXED_KINDS = ("http", "builtin")
