"""Did training help? The paired effect of a change on pass@1, pooled over repeats, and the verdict on it.

A learning experiment evaluates the same tasks before and after training (and, as a control, the base weights
once more or a run trained at learning rate 0). Each repeat draws its own task instances and training seed; the
task *types* (templates) are the same in every repeat. From the three ``eval.json`` files of each repeat:

- :func:`paired_rows` pairs every task's pass@1 before, after and in the control, with its type and its held-out
  groups (:func:`forge_cli.eval.metrics.exposure_groups`);
- :func:`paired_effect` pools the rows of every repeat in one group (``overall``, ``unseen/not guided``, ...):
  the means before, after and in the control, ``delta = after - before`` with a 95% paired-bootstrap interval
  that resamples task types (a template's tasks of every repeat are drawn together: they share what is learnable
  about the type), and ``net = after - (before + control) / 2`` with its interval (the effect beyond the noise of
  evaluating the same weights twice);
- :func:`verdict`: the target is met only when the interval's **lower end** exceeds ``target`` **and** the net
  effect is at least ``target``; a point estimate above the target is not enough.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from forge_cli.eval.compare import load_eval
from forge_cli.eval.metrics import bootstrap_mean_ci, exposure_groups, task_cluster

RESAMPLES = 2000


@dataclass(frozen=True)
class PairedTask:
    """One task of one repeat: pass@1 before, after and in the control (None: no control run)."""

    repeat: int
    task_id: str
    template: str  # the task's type: what the bootstrap resamples
    groups: tuple[str, ...]  # its held-out groups, e.g. ("unseen", "unseen/not guided")
    before: float
    after: float
    control: float | None = None


@dataclass(frozen=True)
class Effect:
    """A group's pooled paired effect (fractions, not points); interval ends are 95% cluster-bootstrap bounds."""

    group: str
    tasks: int
    templates: int
    repeats: int
    before: float
    after: float
    delta: float
    low: float
    high: float
    control: float | None = None
    net: float | None = None
    net_low: float | None = None
    net_high: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Verdict:
    met: bool
    lower_end_ok: bool  # the interval's lower end exceeds the target
    net_ok: bool  # after - mean(before, control) reaches the target
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _pass1(row: dict[str, Any]) -> float | None:
    value = (row.get("pass_at") or {}).get("1")
    return None if value is None else float(value)


def _mean_score(row: dict[str, Any]) -> float | None:
    value = row.get("mean_score")
    return None if value is None else float(value)


# what a paired row compares: pass@1 (a task passed), or the verifier's mean score over the trials (partial credit)
MEASURES = {"pass@1": _pass1, "mean_score": _mean_score}


def paired_rows(before: Path, after: Path, control: Path | None, repeat: int,
                measure: str = "pass@1") -> list[PairedTask]:
    """The tasks every given ``forge eval`` run (directory or eval.json) has ``measure`` for, paired."""
    value_of = MEASURES[measure]
    runs = [load_eval(path)[1] for path in (before, after, *([control] if control is not None else []))]
    by_id = [{str(row["task_id"]): row for row in data["tasks"]} for data in runs]
    out = []
    for task_id in sorted(set.intersection(*(set(rows) for rows in by_id))):
        values = [value_of(rows[task_id]) for rows in by_id]
        if any(v is None for v in values):
            continue
        row = by_id[0][task_id]
        out.append(PairedTask(repeat=repeat, task_id=task_id, template=task_cluster(task_id, row.get("template")),
                              groups=("overall", *exposure_groups(row.get("seen"), row.get("guided"))),
                              before=values[0], after=values[1],  # type: ignore[arg-type]
                              control=values[2] if control is not None else None))
    return out


def paired_effect(rows: Sequence[PairedTask], group: str = "overall", resamples: int = RESAMPLES,
                  seed: int = 0) -> Effect | None:
    """The pooled effect over the rows in ``group`` (None when it has none)."""
    chosen = [r for r in rows if group in r.groups]
    if not chosen:
        return None
    n = len(chosen)
    clusters = [r.template for r in chosen]
    deltas = [r.after - r.before for r in chosen]
    low, high = bootstrap_mean_ci(deltas, resamples=resamples, seed=seed, clusters=clusters)
    effect: dict[str, Any] = {
        "group": group, "tasks": n, "templates": len(set(clusters)), "repeats": len({r.repeat for r in chosen}),
        "before": sum(r.before for r in chosen) / n, "after": sum(r.after for r in chosen) / n,
        "delta": sum(deltas) / n, "low": low, "high": high}
    if all(r.control is not None for r in chosen):
        nets = [r.after - (r.before + r.control) / 2 for r in chosen]  # type: ignore[operator]
        net_low, net_high = bootstrap_mean_ci(nets, resamples=resamples, seed=seed, clusters=clusters)
        effect.update(control=sum(r.control for r in chosen) / n,  # type: ignore[misc]
                      net=sum(nets) / n, net_low=net_low, net_high=net_high)
    return Effect(**effect)


def verdict(effect: Effect | None, target: float = 0.10) -> Verdict:
    """Met only when the lower end of the interval of (after - before) exceeds ``target`` and
    after - mean(before, control) is at least ``target`` (both as fractions: 0.10 is +10 points)."""
    if effect is None:
        return Verdict(False, False, False, "no task in the group")
    lower_end_ok = effect.low > target
    net_ok = effect.net is not None and effect.net >= target
    reasons = [f"lower end of the 95% interval {100 * effect.low:+.1f} points "
               + ("exceeds" if lower_end_ok else "does not exceed") + f" +{100 * target:.0f}",
               "no control run" if effect.net is None else
               f"net of the control {100 * effect.net:+.1f} points " + ("reaches" if net_ok else "falls short of")
               + f" +{100 * target:.0f}"]
    return Verdict(lower_end_ok and net_ok, lower_end_ok, net_ok, "; ".join(reasons))
