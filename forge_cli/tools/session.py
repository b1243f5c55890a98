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

import abc
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from forge_cli.plugins import Registry


@dataclass(frozen=True)
class Outcome:
    """What a dispatch returned: a JSON value, and whether it is a tool error the agent should see."""

    result: Any
    is_error: bool = False
    # images beside the result (media type, base64): MCP clients get them as image content
    images: tuple[tuple[str, str], ...] = ()


class ToolSession(abc.ABC):
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

    async def start(self) -> None:  # noqa: B027 (a session with nothing to start keeps this one)
        """Bring the backend up for this rollout (before the harness starts)."""

    @abc.abstractmethod
    async def call(self, name: str, arguments: dict[str, Any]) -> Outcome:
        """Run tool ``name`` (already validated against its input schema) and return what the agent sees."""

    async def state(self) -> dict[str, Any]:
        """What the verifier reads as ``services.<kind>`` (JSON-serialisable)."""
        return {}

    async def close(self) -> None:  # noqa: B027 (a session with nothing to release keeps this one)
        """Release everything :meth:`start` took (idempotent; runs after a failed start too)."""


class Answer(Protocol):
    """What a backend's own session answers a call with (the browser's and the desktop's)."""

    @property
    def text(self) -> Any: ...
    @property
    def is_error(self) -> bool: ...
    @property
    def images(self) -> tuple[tuple[str, str], ...]: ...


class Backend(Protocol):
    """A backend's own session object: started, called, read and closed as a tool session is."""

    async def start(self) -> None: ...
    async def call(self, name: str, arguments: dict[str, Any]) -> Answer: ...
    async def state(self) -> dict[str, Any]: ...
    async def close(self) -> None: ...


class BackendToolSession(ToolSession):
    """A tool session that hands every step to a backend's own session object (``self.backend``, made by
    :meth:`make`), turning its answers into ``Outcome``s: the browser's and the desktop's."""

    def __init__(self, setup: dict[str, Any], log_dir: Path | None, rollout_id: str) -> None:
        super().__init__(setup, log_dir, rollout_id)
        self.backend = self.make()

    @abc.abstractmethod
    def make(self) -> Backend:
        """The backend's session for this rollout (``self.setup``, ``self.log_dir``, ``self.rollout_id``)."""

    async def start(self) -> None:
        await self.backend.start()

    async def call(self, name: str, arguments: dict[str, Any]) -> Outcome:
        answer = await self.backend.call(name, arguments)
        return Outcome(answer.text, answer.is_error, answer.images)

    async def state(self) -> dict[str, Any]:
        return await self.backend.state()

    async def close(self) -> None:
        await self.backend.close()


TOOL_SESSIONS: Registry[type[ToolSession]] = Registry("tool session", ToolSession, "forge.tool_sessions",
                                                      own="*/tool_session.py")

# the backend kinds every tool server has (not sessions): a session may not take these names
FIXED_KINDS = ("http", "builtin")
