"""Stand-in get_grader: the AbstractGrader subclass in tasks/<id>/grader.py."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

from .base import AbstractGrader


def get_grader(task_id: str, tasks_dir: str | Path = "tasks", task_dir: str | Path | None = None) -> AbstractGrader:
    path = Path(task_dir or Path(tasks_dir) / task_id) / "grader.py"
    spec = importlib.util.spec_from_file_location(f"task_grader_{task_id}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for _, obj in inspect.getmembers(module, inspect.isclass):
        if issubclass(obj, AbstractGrader) and obj is not AbstractGrader and obj.__module__ == module.__name__:
            return obj()
    raise ValueError(f"No AbstractGrader subclass found in {path}")
