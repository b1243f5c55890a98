"""The evaluation report's data: :class:`EvalReport` (one run's metrics and trials) and its JSON form.

Its own module so that both writers, the terminal/JSON one (``report.py``) and the HTML one (``html.py``), import it
without importing each other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forge_cli.eval.metrics import EvalMetrics

SCHEMA_VERSION = 1
JSON_NAME = "eval.json"
HTML_NAME = "report.html"


def json_native(value: Any) -> Any:
    """``value`` as JSON would give it back (tuples become lists, unknown objects their ``str``)."""
    return json.loads(json.dumps(value, default=str))


@dataclass
class EvalReport:
    """One evaluation run's metrics and trials (JSON-native, see :func:`build_report`), and its report directory."""

    meta: dict[str, Any]
    metrics: EvalMetrics
    trials: dict[str, list[dict[str, Any]]]  # task id -> its trials (infra errors included), by trial index
    out_dir: Path
    infra_errors: list[dict[str, Any]] = field(default_factory=list)

    @property
    def json_path(self) -> Path:
        return self.out_dir / JSON_NAME

    @property
    def html_path(self) -> Path:
        return self.out_dir / HTML_NAME

    def to_dict(self) -> dict[str, Any]:
        m = self.metrics.to_dict()
        tasks = [{**row, "trials": self.trials.get(row["task_id"], [])} for row in m.pop("tasks")]
        return {"schema": SCHEMA_VERSION, "meta": self.meta, **m, "tasks": tasks, "infra_errors": self.infra_errors}
