"""A task tool: name, description, JSON-Schema input and the backend that executes a dispatch."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from forge_cli.errors import UserError

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


class BrowserBackendSpec(_Strict):
    """The rollout's own browser: the call goes to its ``@playwright/mcp`` server (forge_cli/browser/session.py).
    The page it opens and the script that reads its state come from the task's ``tool_state.browser``."""

    kind: Literal["browser"]


class DesktopBackendSpec(_Strict):
    """The rollout's own desktop (OSWorld-style container): an action becomes pyautogui code
    (forge_cli/desktop/actions.py) run by the container's in-VM server; observations read its screenshot or
    accessibility tree (forge_cli/desktop/a11y.py)."""

    kind: Literal["desktop"]


BackendSpec = Annotated[HttpBackendSpec | BuiltinBackendSpec | BrowserBackendSpec | DesktopBackendSpec,
                        Field(discriminator="kind")]


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
            tools.append(ToolSpec.model_validate(entry))
        except ValidationError as exc:
            problems += [f"tools.{i}.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()]
    if problems:
        raise UserError(f"{where}: invalid tool spec ({'; '.join(problems)})",
                        fix="each tool needs name, description, input_schema (type: object) and backend "
                            "{kind: http, url}, {kind: builtin, service}, {kind: browser} or {kind: desktop}",
                        exit_code=2) from None
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise UserError(f"{where}: duplicate tool names in {names}", exit_code=2)
    return tuple(tools)
