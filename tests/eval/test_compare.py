"""``forge_cli.eval.compare``: two runs' eval.json (written here by ``write_reports``), B minus A."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from forge_cli.errors import UserError
from forge_cli.eval.compare import Comparison, compare, render_comparison
from forge_cli.eval.report import write_reports
from tests.eval import task_trials, trial


def write_run(root: Path, name: str, tasks: dict[str, tuple[str, list[bool]]], k: int = 3,
              extra: list[dict[str, Any]] | None = None) -> Path:
    run_dir = root / name
    trials = [t for tid, (cat, outcomes) in tasks.items() for t in task_trials(tid, outcomes, category=cat)]
    meta = {"run_id": name, "run_dir": str(run_dir), "harness": "react", "env": "builtin", "split": "test",
            "model": f"model-{name}", "trials": k, "temperature": 1.0, "config": {}, "started": "", "duration_s": 1.0}
    write_reports(trials + (extra or []), meta, run_dir)
    return run_dir


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Path, Path]:
    a = write_run(tmp_path, "a", {"t1": ("shell", [True, False, False]), "t2": ("shell", [True, True, True]),
                                  "t3": ("web", [False, False, False]), "gone": ("web", [True, True, True])})
    b = write_run(tmp_path, "b", {"t1": ("shell", [True, True, False]), "t2": ("shell", [True, True, True]),
                                  "t3": ("web", [True, True, True]), "new": ("web", [False, False, False])})
    return a, b


def test_compare_per_task_category_and_overall(runs: tuple[Path, Path]) -> None:
    cmp = compare(*runs)
    assert isinstance(cmp, Comparison)
    assert cmp.k == 3 and cmp.metric_names == ["mean score", "pass@1", "pass^3"]
    assert (cmp.a.run_id, cmp.b.model, cmp.a.tasks) == ("a", "model-b", 4)
    assert (cmp.only_a, cmp.only_b) == (["gone"], ["new"])
    assert [t.task_id for t in cmp.tasks] == ["t1", "t2", "t3"]

    t1, t2, t3 = cmp.tasks
    assert t1.metrics["pass@1"].delta == pytest.approx(1 / 3)
    assert (t1.metrics["pass^3"].a, t1.metrics["pass^3"].b, t1.metrics["pass^3"].delta) == (0.0, 0.0, 0.0)
    assert t1.metrics["mean score"].delta == pytest.approx(1 / 3)
    assert all(d.delta == 0 for d in t2.metrics.values())
    assert t3.metrics["pass^3"].delta == 1.0

    overall = cmp.overall
    assert overall.tasks == 3
    p1 = overall.metrics["pass@1"]
    assert (p1.a, p1.b, p1.delta, p1.n) == (pytest.approx(4 / 9), pytest.approx(8 / 9), pytest.approx(4 / 9), 3)
    hat = overall.metrics["pass^3"]
    assert (hat.a, hat.b, hat.delta) == (pytest.approx(1 / 3), pytest.approx(2 / 3), pytest.approx(1 / 3))
    for d in overall.metrics.values():
        assert d.low is not None and d.high is not None and d.delta is not None
        assert d.low <= d.delta <= d.high

    assert list(cmp.categories) == ["shell", "web"]
    assert cmp.categories["shell"].metrics["pass@1"].a == pytest.approx(2 / 3)
    assert cmp.categories["shell"].metrics["pass@1"].b == pytest.approx(5 / 6)
    assert cmp.categories["web"].metrics["pass@1"].delta == 1.0
    assert compare(*runs).to_dict() == cmp.to_dict()  # deterministic


def test_different_k_compares_pass_hat_at_the_smaller_k(tmp_path: Path) -> None:
    a = write_run(tmp_path, "a", {"t": ("shell", [True, True, False])}, k=3)
    b = write_run(tmp_path, "b", {"t": ("shell", [True, True])}, k=2)
    cmp = compare(a, b)
    assert cmp.k == 2 and "pass^2" in cmp.metric_names
    d = cmp.tasks[0].metrics["pass^2"]
    assert (d.a, d.b, d.delta) == (pytest.approx(1 / 3), 1.0, pytest.approx(2 / 3))  # C(2,2)/C(3,2) -> 1


def test_tasks_without_enough_counted_trials_are_left_out_of_the_aggregate(tmp_path: Path) -> None:
    a = write_run(tmp_path, "a", {"t": ("x", [True, True]), "u": ("x", [False, False])}, k=2)
    infra = [trial("u", 0, True), trial("u", 1, None, status="infra_error")]
    b = write_run(tmp_path, "b", {"t": ("x", [True, False])}, k=2, extra=infra)
    cmp = compare(a, b)
    u = cmp.tasks[1].metrics["pass^2"]
    assert (u.a, u.b, u.delta) == (0.0, None, None)
    hat = cmp.overall.metrics["pass^2"]
    assert (hat.n, hat.delta) == (1, -1.0)  # only t: 1 -> 0
    assert cmp.overall.metrics["pass@1"].n == 2


def test_missing_run_or_eval_json_is_a_user_error(tmp_path: Path, runs: tuple[Path, Path]) -> None:
    with pytest.raises(UserError, match="no such run directory") as e:
        compare(tmp_path / "nope", runs[1])
    assert e.value.exit_code == 2 and e.value.fix
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=r"has no eval\.json") as e:
        compare(runs[0], tmp_path / "empty")
    assert e.value.exit_code == 2
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "eval.json").write_text("{not json")
    with pytest.raises(UserError, match="cannot read") as e:
        compare(runs[0], tmp_path / "bad")
    assert e.value.exit_code == 2
    (tmp_path / "bad" / "eval.json").write_text('{"tasks": 3}')
    with pytest.raises(UserError, match=r"not an eval\.json"):
        compare(runs[0], tmp_path / "bad")


def test_eval_json_path_works_too(runs: tuple[Path, Path]) -> None:
    assert compare(runs[0] / "eval.json", runs[1]).a.path == str(runs[0])


def test_render_comparison_plain(runs: tuple[Path, Path]) -> None:
    out = io.StringIO()
    render_comparison(compare(*runs), Console(file=out, force_terminal=False, width=80))
    text = out.getvalue()
    lines = text.splitlines()
    assert lines[0].startswith(f"A: {runs[0]} (a: react on builtin, model-a, K=3)")
    assert "B minus A over 3 common task(s)" in text
    overall = next(line for line in lines if line.startswith("overall"))
    assert "0.444 -> 0.889" in overall and "+0.444 [" in overall
    assert "2 task(s) changed" in text and "1 common task(s) unchanged" in text
    assert any(line.startswith("t3 ") for line in lines) and not any(line.startswith("t2 ") for line in lines)
    assert "1 task(s) only in A: gone" in text and "1 task(s) only in B: new" in text
    assert "\x1b[" not in text


def test_render_comparison_rich(runs: tuple[Path, Path]) -> None:
    out = io.StringIO()
    render_comparison(compare(*runs), Console(file=out, force_terminal=True, width=240))
    assert "┃" in out.getvalue() and "only in B" in out.getvalue()
