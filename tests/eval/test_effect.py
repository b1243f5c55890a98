"""The learning benchmark's statistics and verdict, pinned on hand-made numbers (issue 31)."""

from __future__ import annotations

from pathlib import Path

import pytest

from forge_cli.eval.effect import Effect, PairedTask, paired_effect, paired_rows, verdict
from forge_cli.eval.report import write_reports
from tests.eval import trial

GROUPS = ("overall", "unseen", "unseen/not guided")


def _rows(deltas: dict[str, list[float]], control: float | None = 0.0, repeats: int = 1) -> list[PairedTask]:
    """Per template, the after-minus-before of each of its tasks (before 0), in every repeat."""
    return [PairedTask(repeat=r, task_id=f"{tpl}-{i}-{r}", template=tpl, groups=GROUPS, before=0.0, after=d,
                       control=control)
            for r in range(repeats) for tpl, ds in deltas.items() for i, d in enumerate(ds)]


def _effect(**fields: float | None) -> Effect:
    base = {"group": "unseen/not guided", "tasks": 18, "templates": 18, "repeats": 2, "before": 0.05,
            "after": 0.25, "delta": 0.20, "low": 0.12, "high": 0.28, "control": 0.05, "net": 0.20}
    return Effect(**{**base, **fields})  # type: ignore[arg-type]


def test_verdict_reads_the_lower_end_and_the_net_not_the_point() -> None:
    assert verdict(_effect()).met
    # the point estimate passes (+20) but the interval reaches down to +4: not met
    point_only = verdict(_effect(low=0.04))
    assert not point_only.met and not point_only.lower_end_ok and point_only.net_ok
    assert "does not exceed +10" in point_only.reason
    # the interval clears +10 but the control moved as much as the training did: not met
    noisy = verdict(_effect(control=0.25, net=0.10 - 1e-9))
    assert not noisy.met and noisy.lower_end_ok and not noisy.net_ok and "falls short of +10" in noisy.reason
    assert not verdict(_effect(low=0.10)).met  # the lower end must exceed the target, not touch it
    assert verdict(_effect(net=0.10)).met  # the net may equal it
    assert not verdict(_effect(control=None, net=None)).met and not verdict(None).met


def test_pooled_effect_resamples_templates_across_repeats() -> None:
    # 4 templates x 2 tasks x 2 repeats: two templates learned fully (+1), two not at all
    rows = _rows({"a": [1.0, 1.0], "b": [1.0, 1.0], "c": [0.0, 0.0], "d": [0.0, 0.0]}, repeats=2)
    effect = paired_effect(rows, "unseen/not guided")
    assert effect is not None
    assert (effect.tasks, effect.templates, effect.repeats, effect.delta) == (16, 4, 2, 0.5)
    assert effect.net == 0.5 and effect.control == 0.0
    # with 4 independent units the interval is wide: from 0 to 1 exactly at these quantiles
    assert effect.low <= 0.25 and effect.high >= 0.75
    # the same numbers as 16 independent tasks would give a far narrower interval
    lone = paired_effect([PairedTask(r.repeat, r.task_id, r.task_id, r.groups, r.before, r.after, r.control)
                          for r in rows], "unseen/not guided")
    assert lone is not None and lone.high - lone.low < effect.high - effect.low
    assert paired_effect(rows, "seen") is None


def test_point_estimate_above_target_with_a_lower_end_below_it() -> None:
    """+20 points on average, carried by two templates of ten: the interval's lower end is below +10."""
    rows = _rows({**{f"t{i}": [0.0] for i in range(8)}, "t8": [1.0], "t9": [1.0]})
    effect = paired_effect(rows, "overall")
    assert effect is not None and effect.delta == pytest.approx(0.2) and effect.low < 0.1
    assert not verdict(effect).met


def test_net_of_the_control() -> None:
    rows = [PairedTask(0, "x", "x", GROUPS, before=0.2, after=0.5, control=0.4)]
    effect = paired_effect(rows, "overall")
    assert effect is not None and effect.net == pytest.approx(0.5 - 0.3) and effect.control == 0.4


def test_paired_rows_from_eval_json(tmp_path: Path) -> None:
    def run(name: str, passing: set[str]) -> Path:
        out = tmp_path / name
        trials = [trial(task, i, task in passing, template=f"tpl-{task}", seen=task == "s", guided=False)
                  for task in ("s", "u") for i in range(2)]
        write_reports(trials, {"run_id": name, "run_dir": str(out), "trials": 2}, out)
        return out

    rows = paired_rows(run("before", set()), run("after", {"u"}), run("control", {"s"}), repeat=3)
    assert [(r.task_id, r.template, r.groups, r.before, r.after, r.control, r.repeat) for r in rows] == [
        ("s", "tpl-s", ("overall", "seen", "seen/not guided"), 0.0, 0.0, 1.0, 3),
        ("u", "tpl-u", ("overall", "unseen", "unseen/not guided"), 0.0, 1.0, 0.0, 3)]
