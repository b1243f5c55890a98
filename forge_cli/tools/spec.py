"""A task tool: name, description, JSON-Schema input and the backend that executes a dispatch."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, field_validator

from forge_cli.errors import UserError
from forge_cli.tools.session import FIXED_KINDS, TOOL_SESSIONS

TOOL_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HttpBackendSpec(_Strict):
    """POST the JSON arguments to an environment service (e.g. a Claw-Eval mock service)."""

    kind: Literal["http"]
    url: str
    timeout_s: Annotated[float, Field(gt=0)] = 30.0


class BuiltinBackendSpec(_Strict):
    """One of forge's own in-process demo services (forge_cli/tools/services.py), state kept per rollout."""

    kind: Literal["builtin"]
    service: str


class SessionBackendSpec(_Strict):
    """A tool session (``forge_cli/tools/session.py``): a backend with a lifetime of one rollout, named by ``kind``
    (forge's: ``browser``, the rollout's own browser; ``desktop``, its own desktop; or one a package registers).
    Its setup comes from the task's ``tool_state.<kind>``."""

    kind: str

    @field_validator("kind")
    @classmethod
    def _not_fixed(cls, value: str) -> str:
        # that the kind is registered is checked where a task's tools are read (parse_tools): forge's own specs are
        # built while the session modules themselves are imported
        if value in FIXED_KINDS:
            raise ValueError(f"backend kind {value!r} takes its own fields")
        return value


def _backend_tag(value: Any) -> str:
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    return str(kind) if kind in FIXED_KINDS else "session"


BackendSpec = Annotated[Annotated[HttpBackendSpec, Tag("http")] | Annotated[BuiltinBackendSpec, Tag("builtin")]
                        | Annotated[SessionBackendSpec, Tag("session")], Discriminator(_backend_tag)]


class ToolSpec(_Strict):
    """What the harness sees (name, description, input schema) and where a call goes (backend)."""

    name: str
    description: str
    input_schema: dict[str, Any] = {"type": "object", "properties": {}}
    backend: BackendSpec

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not TOOL_NAME.match(value):
            raise ValueError(f"'{value}' is not a tool name (letters, digits, _ and -, starting with a letter)")
        return value

    @field_validator("input_schema")
    @classmethod
    def _schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("type") != "object":
            raise ValueError("input_schema must be a JSON Schema with type: object")
        return value


def parse_tools(entries: Any, where: str) -> tuple[ToolSpec, ...]:
    """Tool specs from a task file's ``tools`` list; one UserError naming every problem."""
    if entries is None:
        return ()
    if not isinstance(entries, list):
        raise UserError(f"{where}: `tools` must be a list of tool specs", exit_code=2)
    tools, problems = [], []
    for i, entry in enumerate(entries):
        try:
            tool = ToolSpec.model_validate(entry)
        except ValidationError as exc:
            problems += [f"tools.{i}.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()]
            continue
        if isinstance(tool.backend, SessionBackendSpec):
            try:
                TOOL_SESSIONS.get(tool.backend.kind)
            except ValueError as exc:
                problems.append(f"tools.{i}.backend.kind: {exc}")
                continue
        tools.append(tool)
    if problems:
        raise UserError(f"{where}: invalid tool spec ({'; '.join(problems)})",
                        fix="each tool needs name, description, input_schema (type: object) and backend "
                            "{kind: http, url}, {kind: builtin, service} or a tool session: "
                            + ", ".join(f"{{kind: {name}}}" for name in TOOL_SESSIONS.names()),
                        exit_code=2) from None
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise UserError(f"{where}: duplicate tool names in {names}", exit_code=2)
    return tuple(tools)
