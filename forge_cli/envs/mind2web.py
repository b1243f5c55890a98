"""``env=mind2web``: Online-Mind2Web's tasks (the dataset's JSON list of ``{"task_id", "confirmed_task", "website",
"reference_length", "level"}``; never shipped here) in a real browser, judged by WebJudge's three stages: key points,
screenshot relevance 1-5, outcome (forge_cli/envs/web/). The level (easy/medium/hard) is the task's category."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

from forge_cli.envs.web import Protocol, WebTask, WebTaskSource


class Mind2WebSource(WebTaskSource, name="mind2web"):
    protocol: ClassVar[Protocol] = "webjudge"
    example: ClassVar[str] = "/data/Online-Mind2Web/Online_Mind2Web.json"

    def read(self, path: Path) -> list[WebTask]:
        try:
            entries = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON ({exc})") from None
        if not isinstance(entries, list):
            raise ValueError("the file is a JSON list of tasks")
        tasks = []
        for i, entry in enumerate(entries):
            try:
                tasks.append(WebTask(id=str(entry["task_id"]), question=str(entry["confirmed_task"]),
                                     url=str(entry["website"]), site=str(entry.get("level") or "")))
            except (KeyError, TypeError) as exc:
                raise ValueError(f"entry {i}: {type(exc).__name__}: {exc} (each is "
                                 '{"task_id", "confirmed_task", "website", ...})') from None
        return tasks
