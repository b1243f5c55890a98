"""Stand-in for QwenClawBench's scripts/lib_tasks.py (same interface; written for forge's tests)."""

import re
from pathlib import Path
from typing import Any

import yaml


class Task:
    def __init__(self, meta: dict, sections: dict, path: Path) -> None:
        self.task_id = meta.get("id", "")
        self.name = meta.get("name", "")
        self.category = meta.get("category", "")
        self.grading_type = meta.get("grading_type", "automated")
        self.timeout_seconds = meta.get("timeout_seconds", 120)
        self.workspace_files = meta.get("workspace_files", [])
        self.grading_weights = meta.get("grading_weights")
        self.prompt = sections.get("Prompt", "").strip()
        self.expected_behavior = sections.get("Expected Behavior", "").strip()
        self.grading_criteria: list = []
        self.automated_checks = sections.get("Automated Checks")
        self.llm_judge_rubric = sections.get("LLM Judge Rubric")
        self.file_path = path
        self.frontmatter = meta

    def to_dict(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "name": self.name, "category": self.category,
                "grading_type": self.grading_type, "timeout_seconds": self.timeout_seconds,
                "workspace_files": self.workspace_files, "prompt": self.prompt,
                "grading_weights": self.grading_weights, "frontmatter": self.frontmatter}


class TaskLoader:
    def __init__(self, tasks_dir: Path) -> None:
        self.tasks_dir = tasks_dir

    def load_task(self, path: Path) -> Task:
        m = re.match(r"^---\s*\n(.*?)\n---\s*\n(.*)$", path.read_text(encoding="utf-8"), re.DOTALL)
        if not m:
            raise ValueError(f"No YAML frontmatter found in {path}")
        sections: dict[str, str] = {}
        name = None
        for line in m.group(2).split("\n"):
            head = re.match(r"^##\s+(.+)$", line)
            if head:
                name = head.group(1)
                sections[name] = ""
            elif name:
                sections[name] += line + "\n"
        return Task(yaml.safe_load(m.group(1)), {k: v.strip() for k, v in sections.items()}, path)
