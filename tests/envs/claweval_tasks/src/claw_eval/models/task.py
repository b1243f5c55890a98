"""Stand-in TaskDefinition: the task.yaml fields forge's tests use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field


class TaskDefinition(BaseModel):
    model_config = ConfigDict(extra="allow")

    task_id: str
    task_name: str = ""
    category: str = ""
    prompt: dict[str, Any] = Field(default_factory=dict)
    tools: list[dict[str, Any]] = Field(default_factory=list)
    services: list[dict[str, Any]] = Field(default_factory=list)
    local_grader_files: list[str] = Field(default_factory=list)

    @classmethod
    def from_yaml(cls, path: str | Path) -> TaskDefinition:
        return cls.model_validate(yaml.safe_load(Path(path).read_text()))
