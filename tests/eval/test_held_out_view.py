"""The held-out view of the reports (issue 31): intervals that resample task types, seen / unseen and guided /
not-guided groups in the metrics, the comparison, the terminal table, eval.json and report.html."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from forge_cli.eval.compare import compare
from forge_cli.eval.metrics import aggregate, bootstrap_mean_ci, exposure_groups, spread_chance
from forge_cli.eval.report import render_table, write_reports
from tests.eval import trial


def test_cluster_bootstrap_with_distinct_labels_is_the_plain_bootstrap() -> None:
    values = [0.0, 1.0, 1.0, 0.0, 0.5, 1.0, 0.0, 0.25]
    assert bootstrap_mean_ci(values, clusters=[f"t{i}" for i in range(8)]) == bootstrap_mean_ci(values)


def test_cluster_bootstrap_widens_when_tasks_of_a_type_move_together() -> None:
    # four types, three tasks each, every type all-or-nothing: 4 independent units, not 12
    values = [1.0] * 3 + [0.0] * 3 + [1.0] * 3 + [0.0] * 3
    clusters = [f"type-{i // 3}" for i in range(12)]
    plain, clustered = bootstrap_mean_ci(values), bootstrap_mean_ci(values, clusters=clusters)
    assert clustered[1] - clustered[0] > plain[1] - plain[0] + 0.1
    assert clustered[0] <= 0.5 <= clustered[1]


def test_exposure_groups() -> None:
    assert exposure_groups(None, True) == []
    assert exposure_groups(True, None) == ["seen"]
    assert exposure_groups(False, False) == ["unseen", "unseen/not guided"]
    assert exposure_groups(True, True) == ["seen", "seen/guided"]


def _trials(passes: dict[str, int]) -> list[dict[str, Any]]:
    """Tasks of four kinds, 3 trials each: passes[task] of them pass."""
    kinds = {"s-g": (True, True, "tpl-a"), "s-n": (True, False, "tpl-b"), "u-g": (False, True, "tpl-c"),
             "u-n1": (False, False, "tpl-d"), "u-n2": (False, False, "tpl-d")}
    return [trial(task, i, i < passes.get(task, 0), template=kinds[task][2], seen=kinds[task][0],
                  guided=kinds[task][1]) for task in kinds for i in range(3)]


def test_metrics_and_reports_give_seen_and_unseen_apart(tmp_path: Path) -> None:
    m = aggregate(_trials({"s-g": 3, "s-n": 2, "u-g": 1}), trials_per_task=3)
    assert list(m.exposure) == ["seen", "seen/guided", "seen/not guided", "unseen", "unseen/guided",
                                "unseen/not guided"]
    assert m.exposure["seen"].tasks == 2 and m.exposure["seen"].pass_at[1].value == (1 + 2 / 3) / 2
    assert m.exposure["unseen/not guided"].tasks == 2 and m.exposure["unseen/not guided"].pass_at[1].value == 0.0
    assert m.tasks[3].template == "tpl-d" and m.tasks[3].seen is False and m.tasks[3].guided is False
    run = tmp_path / "run"
    report = write_reports(_trials({"s-g": 3}), {"run_id": "r", "run_dir": str(run), "trials": 3}, run)
    saved = json.loads(report.json_path.read_text())
    assert set(saved["exposure"]) >= {"seen", "unseen", "unseen/not guided"}
    assert saved["tasks"][0]["template"] == "tpl-a" and saved["tasks"][0]["seen"] is True
    out = io.StringIO()
    render_table(report, Console(file=out, width=200))
    text = out.getvalue()
    assert "unseen/not guided" in text and "seen/guided" in text and "bootstrap over task types" in text
    page = report.html_path.read_text()
    assert page.count('class="task-row unseen"') == 3 and page.count('class="task-row"') == 2
    assert page.count('<span class="tag unseen"') == 3 and "tpl-d" in page


def test_a_report_without_task_types_has_no_held_out_view(tmp_path: Path) -> None:
    m = aggregate([trial("a", 0, True), trial("b", 0, False)], trials_per_task=1)
    assert m.exposure == {} and [row[0] for row in m.summary()[1]] == ["overall", "shell"]


def test_compare_gives_the_groups_and_resamples_types(tmp_path: Path) -> None:
    runs = []
    for name, passes in (("a", {"s-g": 1}), ("b", {"s-g": 3, "u-n1": 3, "u-n2": 3})):
        run = tmp_path / name
        write_reports(_trials(passes), {"run_id": name, "run_dir": str(run), "trials": 3}, run)
        runs.append(run)
    cmp = compare(runs[0], runs[1])
    unseen = cmp.exposure["unseen/not guided"].metrics["pass@1"]
    assert (unseen.a, unseen.b, unseen.delta, unseen.n) == (0.0, 1.0, 1.0, 2)
    # both tasks are one template: one unit, so the interval is the single value
    assert (unseen.low, unseen.high) == (1.0, 1.0)
    assert [t.template for t in cmp.tasks if t.task_id.startswith("u-n")] == ["tpl-d", "tpl-d"]


def test_spread_chance() -> None:
    assert spread_chance([1.0]) is None
    assert spread_chance([0.0, 0.0, 0.0]) == 0.0
    assert spread_chance([0.0, 1.0]) == 1.0  # the one pair differs (a lower bound with 2 trials)
    assert spread_chance([0.0, 0.0, 1.0]) == pytest.approx(2 / 3)  # two of the three pairs differ
    # 4+ trials: 1 - P(a group of 4 drawn from them is all equal); 2 passes of 5 -> C(3,4) + C(2,4) = 0
    assert spread_chance([1.0, 1.0, 0.0, 0.0, 0.0]) == 1.0
    assert spread_chance([1.0, 0.0, 0.0, 0.0, 0.0]) == pytest.approx(0.8)  # 1 of the C(5,4) = 5 groups is all 0
    assert spread_chance([0.5, 0.5, 0.1, 0.5], group=4) == 1.0
