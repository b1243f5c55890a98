"""``env=webvoyager``: WebVoyager's tasks (``data/WebVoyager_data.jsonl`` of its repository, one
``{"web_name", "id", "ques", "web"}`` object per line; never shipped here) in a real browser, judged by WebVoyager's
protocol: the final answer and the last ``env.options.judge_screenshots`` screenshots (forge_cli/envs/web/)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

from forge_cli.envs.web import Protocol, WebTask, WebTaskSource


class WebVoyagerSource(WebTaskSource, name="webvoyager"):
    protocol: ClassVar[Protocol] = "webvoyager"
    example: ClassVar[str] = "/data/WebVoyager/data/WebVoyager_data.jsonl"

    def read(self, path: Path) -> list[WebTask]:
        tasks = []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                tasks.append(WebTask(id=str(entry["id"]), question=str(entry["ques"]), url=str(entry["web"]),
                                     site=str(entry.get("web_name") or "")))
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise ValueError(f"line {number}: {type(exc).__name__}: {exc} (each line is "
                                 '{"web_name", "id", "ques", "web"})') from None
        return tasks
