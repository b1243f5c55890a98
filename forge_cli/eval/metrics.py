"""Evaluation metrics over trials: pass@k, pass^k and mean score per task, per category and overall, with CIs.

Input contract (what ``forge eval`` hands over): one dict per finished rollout,
``{"task_id", "category", "template", "seen", "guided", "trial", "rollout_id", "status", "reward", "passed",
"logs", "calls", "error", "duration_s"}``. Only ``task_id``, ``category``, ``template``, ``seen``, ``guided``,
``status``, ``reward`` and ``passed`` are read here (the three task-type keys may be absent or None).

Counting rules:

- A trial with status ``infra_error``, or whose ``passed`` is None (it could not be verified), is not an agent
  failure: it is left out of ``n`` for its task and counted in ``infra_errors``.
- Every other trial counts; it passed when ``passed`` is True. Its score is ``reward`` (None counts as 0).
- Per task, with ``n`` counted trials of which ``c`` passed: ``mean_score`` is the mean of the scores,
  ``pass_rate`` is ``c / n``, and for each reported k (default 1 and K, the trials per task):

  - pass@k (:func:`pass_at_k`): the unbiased estimator ``1 - C(n-c, k) / C(n, k)`` of "at least one of k
    trials passes" (Chen et al. 2021, HumanEval).
  - pass^k (:func:`pass_hat_k`): "all k trials pass". Two definitions exist and both are here:
    :func:`pass_hat_k_unbiased` is ``C(c, k) / C(n, k)`` (tau-bench's pass^k); :func:`pass_hat_k_claw_eval` is
    Claw-Eval's batch summary (``src/claw_eval/cli.py``, ``cmd_batch``, upstream commit 9365e1a): a task counts
    for pass^k when ``all(tr["passed"] for tr in trials)`` over its k = n trials (and for pass@k when ``any``).
    With n == k the two definitions are equal (``C(c, k) / C(k, k)`` is 1 when c == k, else 0), so the reported
    pass^k is Claw-Eval's rule when n == k and the unbiased estimator when n > k (Claw-Eval never has n > k:
    its k is the number of trials it ran). (Claw-Eval's *per-task* field ``pass_hat_k``, from
    ``models/scoring.py``'s ``compute_pass_hat_k``, is the biased ``(c/n)**k``; forge does not report it.
    Claw-Eval's ``passed`` is ``task_score >= 0.75`` and a trial that errored counts there as a failure;
    forge takes ``passed`` from the verifier and leaves infra errors out.)
  - When infra errors leave a task with n < k trials, its pass@k and pass^k are None (not estimable) and the
    task is left out of those aggregates; each aggregate's ``n`` says how many tasks it is over.

- Per category and overall: ``mean_score``, ``pass@k`` and ``pass^k`` are means over tasks of the per-task
  values, with a 95% percentile-bootstrap interval (fixed seed: deterministic) that resamples *task types*: tasks
  that name the same ``template`` (instances of one builtin template, say) are drawn together, since they succeed
  or fail together; a task without one is a type of its own (then it is the plain bootstrap over tasks).
  ``pass_rate`` is the plain per-trial rate (all counted trials pooled) with a 95% Wilson interval.
- Held-out view (``exposure``), when tasks say whether their type was trained on (``seen``) and whether the
  instruction shows the solving command (``guided``): the same aggregates over the groups of
  :data:`EXPOSURE_GROUPS` (``seen``, ``seen/guided``, ``seen/not guided``, ``unseen``, ...), those with tasks.

Everything returns plain dataclasses with ``to_dict()`` (JSON-ready: the k of ``pass_at`` / ``pass_hat`` become
string keys).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

Z_95 = 1.959963984540054  # the standard normal's 97.5% quantile
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 0
UNCATEGORIZED = "uncategorized"
# the held-out view's groups: a task is in "seen" or "unseen" and, when it says, in one of their guided halves
EXPOSURE_GROUPS = ("seen", "seen/guided", "seen/not guided", "unseen", "unseen/guided", "unseen/not guided")


def _check(n: int, c: int, k: int) -> None:
    if n < 0 or c < 0 or k < 1:
        raise ValueError(f"need n >= 0, c >= 0, k >= 1 (got n={n}, c={c}, k={k})")
    if c > n:
        raise ValueError(f"more passes than trials (c={c} > n={n})")
    if n < k:
        raise ValueError(f"pass@k / pass^k need at least k trials (n={n} < k={k})")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k, ``1 - C(n-c, k) / C(n, k)``, in the stable product form of Chen et al. 2021.

    ``C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i)``. Needs ``1 <= k <= n`` and ``0 <= c <= n``.
    """
    _check(n, c, k)
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def pass_hat_k_unbiased(n: int, c: int, k: int) -> float:
    """Unbiased pass^k (tau-bench), ``C(c, k) / C(n, k) = prod_{i=0}^{k-1} (c - i) / (n - i)``."""
    _check(n, c, k)
    if c < k:
        return 0.0
    return math.prod((c - i) / (n - i) for i in range(k))


def pass_hat_k_claw_eval(n: int, c: int, k: int) -> float:
    """Claw-Eval's batch-summary pass^k: 1.0 when all of the task's trials passed, else 0.0.

    Claw-Eval runs exactly k trials per task and counts ``all(tr["passed"] for tr in trials)``; the rule is
    only defined for n == k (ValueError otherwise: use :func:`pass_hat_k_unbiased` for n > k).
    """
    _check(n, c, k)
    if n != k:
        raise ValueError(f"Claw-Eval's pass^k is over exactly k trials (n={n} != k={k})")
    return 1.0 if c == n else 0.0


def pass_at_k_claw_eval(n: int, c: int, k: int) -> float:
    """Claw-Eval's batch-summary pass@k: 1.0 when any of the task's k trials passed (n == k only)."""
    _check(n, c, k)
    if n != k:
        raise ValueError(f"Claw-Eval's pass@k is over exactly k trials (n={n} != k={k})")
    return 1.0 if c > 0 else 0.0


def pass_hat_k(n: int, c: int, k: int) -> float:
    """The reported pass^k: Claw-Eval's rule when n == k, the unbiased estimator when n > k (equal at n == k)."""
    return pass_hat_k_claw_eval(n, c, k) if n == k else pass_hat_k_unbiased(n, c, k)


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (95% for the default z); contains ``successes / n``."""
    if n <= 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n and n > 0 (got {successes}/{n})")
    p = successes / n
    denom = 1.0 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return min(max(0.0, center - half), p), max(min(1.0, center + half), p)


def spread_chance(rewards: Sequence[float], group: int = 4) -> float | None:
    """The chance that ``group`` rollouts of a task do not all get the same reward, from its trials' ``rewards``
    (None with fewer than 2). With at least ``group`` trials: the unbiased estimate 1 - sum_v C(c_v, group) /
    C(n, group) (c_v: trials with reward v). With fewer: the share of trial pairs whose rewards differ, a lower
    bound of it (a group has a spread whenever any two of its rewards differ)."""
    n = len(rewards)
    if n < 2:
        return None
    counts: dict[float, int] = {}
    for reward in rewards:
        counts[round(reward, 6)] = counts.get(round(reward, 6), 0) + 1
    k = group if n >= group else 2
    return 1.0 - sum(math.comb(c, k) for c in counts.values()) / math.comb(n, k)


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile of an already sorted, non-empty sequence."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def bootstrap_mean_ci(values: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED,
                      level: float = 0.95, clusters: Sequence[str] | None = None) -> tuple[float, float]:
    """Percentile-bootstrap interval of the mean of ``values`` (resampled with replacement, fixed seed).

    ``clusters`` (one label per value): resample clusters instead of values, each drawn cluster bringing all its
    values, and take the mean over the values drawn (the cluster bootstrap: values of one cluster are not
    independent). With every label distinct this is exactly the plain bootstrap, draw for draw.

    Deterministic for a given (values, clusters, resamples, seed). The interval is widened to contain the sample
    mean when resampling noise would leave it a hair outside (identical values, tiny samples).
    """
    if not values:
        raise ValueError("bootstrap of an empty sample")
    if clusters is not None and len(clusters) != len(values):
        raise ValueError(f"{len(clusters)} cluster labels for {len(values)} values")
    point = sum(values) / len(values)
    sums: dict[str, list[float]] = {}
    for i, value in enumerate(values):
        label = clusters[i] if clusters is not None else str(i)
        entry = sums.setdefault(label, [0.0, 0.0])
        entry[0] += value
        entry[1] += 1
    groups = list(sums.values())
    rng = random.Random(seed)
    means = []
    for _ in range(resamples):
        drawn = rng.choices(groups, k=len(groups))
        means.append(sum(g[0] for g in drawn) / sum(g[1] for g in drawn))
    means.sort()
    alpha = (1.0 - level) / 2
    return min(_quantile(means, alpha), point), max(_quantile(means, 1.0 - alpha), point)


@dataclass
class Estimate:
    """A point estimate with its 95% interval; all None when there was nothing to estimate (n == 0)."""

    value: float | None
    low: float | None
    high: float | None
    n: int  # tasks (bootstrap) or trials (wilson) it is over
    method: str  # "bootstrap" | "wilson"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def format(self, digits: int = 3) -> str:
        """``0.583 [0.320, 0.810]``; ``-`` when there is no estimate."""
        if self.value is None:
            return "-"
        return f"{fmt(self.value, digits)} [{fmt(self.low, digits)}, {fmt(self.high, digits)}]"


def fmt(value: float | None, digits: int = 3) -> str:
    """A metric value for people: fixed digits, ``-`` for None."""
    return "-" if value is None else f"{value:.{digits}f}"


@dataclass
class TaskMetrics:
    """One task's counts and metrics (metrics None when the task has no counted trial or n < k)."""

    task_id: str
    category: str
    n: int  # counted trials (infra errors left out)
    passes: int
    infra_errors: int
    mean_score: float | None
    pass_rate: float | None
    pass_at: dict[int, float | None] = field(default_factory=dict)
    pass_hat: dict[int, float | None] = field(default_factory=dict)
    # the task's type (intervals resample types), whether training saw that type, whether the command is shown
    template: str | None = None
    seen: bool | None = None
    guided: bool | None = None

    @property
    def cluster(self) -> str:
        return task_cluster(self.task_id, self.template)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["pass_at"] = {str(k): v for k, v in self.pass_at.items()}
        d["pass_hat"] = {str(k): v for k, v in self.pass_hat.items()}
        return d


@dataclass
class GroupMetrics:
    """Aggregates over a set of tasks (one category, or all of them)."""

    name: str
    tasks: int
    trials: int  # counted trials
    passes: int
    infra_errors: int
    mean_score: Estimate
    pass_rate: Estimate
    pass_at: dict[int, Estimate] = field(default_factory=dict)
    pass_hat: dict[int, Estimate] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "tasks": self.tasks, "trials": self.trials, "passes": self.passes,
            "infra_errors": self.infra_errors, "mean_score": self.mean_score.to_dict(),
            "pass_rate": self.pass_rate.to_dict(),
            "pass_at": {str(k): e.to_dict() for k, e in self.pass_at.items()},
            "pass_hat": {str(k): e.to_dict() for k, e in self.pass_hat.items()},
        }


@dataclass
class EvalMetrics:
    """Everything :func:`aggregate` computes: per task, per category (sorted by name) and overall."""

    trials_per_task: int  # K
    ks: list[int]
    overall: GroupMetrics
    categories: dict[str, GroupMetrics]
    tasks: list[TaskMetrics]
    # the held-out view: EXPOSURE_GROUPS that have tasks (empty when no task says whether it was seen)
    exposure: dict[str, GroupMetrics] = field(default_factory=dict)

    def summary(self) -> tuple[list[str], list[list[str]]]:
        """Headers and rows (overall, the held-out view's groups, then each category) of the summary table both
        reports show."""
        hat_ks = shown_hat_ks(self.ks)
        headers = ["group", "tasks", "trials", "infra", "mean score", "pass rate",
                   *(f"pass@{k}" for k in self.ks), *(f"pass^{k}" for k in hat_ks)]
        rows = [[g.name, str(g.tasks), str(g.trials), str(g.infra_errors), g.mean_score.format(),
                 g.pass_rate.format(), *(g.pass_at[k].format() for k in self.ks),
                 *(g.pass_hat[k].format() for k in hat_ks)]
                for g in [self.overall, *self.exposure.values(), *self.categories.values()]]
        return headers, rows

    def to_dict(self) -> dict[str, Any]:
        return {
            "trials_per_task": self.trials_per_task, "ks": list(self.ks), "overall": self.overall.to_dict(),
            "exposure": {name: g.to_dict() for name, g in self.exposure.items()},
            "categories": {name: g.to_dict() for name, g in self.categories.items()},
            "tasks": [t.to_dict() for t in self.tasks],
        }


def is_infra(trial: Mapping[str, Any]) -> bool:
    """True when the trial is not an agent outcome (status infra_error, or never verified: passed None)."""
    return trial.get("status") == "infra_error" or trial.get("passed") is None


def trial_score(trial: Mapping[str, Any]) -> float:
    """A counted trial's score: its reward, None counting as 0."""
    reward = trial.get("reward")
    return 0.0 if reward is None else float(reward)


def trials_by_task(trials: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Trials grouped by task id (tasks sorted by id, each task's trials by trial index)."""
    grouped: dict[str, list[Mapping[str, Any]]] = {}
    for t in trials:
        grouped.setdefault(str(t["task_id"]), []).append(t)
    return {tid: sorted(grouped[tid], key=lambda t: int(t.get("trial", 0))) for tid in sorted(grouped)}


def shown_hat_ks(ks: Sequence[int]) -> list[int]:
    """The ks whose pass^k the tables show: pass^1 equals pass@1, so it is shown only when 1 is the only k."""
    return [k for k in ks if k > 1] or list(ks)


def default_ks(trials_per_task: int) -> list[int]:
    """The reported ks: 1 and K."""
    return sorted({1, max(1, trials_per_task)})


def task_metrics(task_id: str, trials: Sequence[Mapping[str, Any]], ks: Sequence[int]) -> TaskMetrics:
    """One task's metrics from its trials (see the module docstring for the rules)."""
    counted = [t for t in trials if not is_infra(t)]
    n = len(counted)
    c = sum(1 for t in counted if t.get("passed") is True)
    category = next((str(t["category"]) for t in trials if t.get("category")), UNCATEGORIZED)

    def first(key: str) -> Any:
        return next((t[key] for t in trials if t.get(key) is not None), None)

    return TaskMetrics(
        task_id=task_id, category=category, n=n, passes=c, infra_errors=len(trials) - n,
        mean_score=sum(trial_score(t) for t in counted) / n if n else None,
        pass_rate=c / n if n else None,
        pass_at={k: pass_at_k(n, c, k) if n >= k else None for k in ks},
        pass_hat={k: pass_hat_k(n, c, k) if n >= k else None for k in ks},
        template=first("template"), seen=first("seen"), guided=first("guided"),
    )


def task_cluster(task_id: str, template: str | None) -> str:
    """What the bootstrap resamples a task with: its template, else the task itself."""
    return template or f"task:{task_id}"


def exposure_groups(seen: bool | None, guided: bool | None) -> list[str]:
    """The :data:`EXPOSURE_GROUPS` a task is in: none when it does not say whether it was seen."""
    if seen is None:
        return []
    side = "seen" if seen else "unseen"
    return [side] if guided is None else [side, f"{side}/{'guided' if guided else 'not guided'}"]


def _bootstrap_estimate(values: Iterable[tuple[float | None, str]], resamples: int, seed: int) -> Estimate:
    """Mean and cluster-bootstrap interval of (value, cluster) pairs; None values left out."""
    present = [(v, c) for v, c in values if v is not None]
    if not present:
        return Estimate(None, None, None, 0, "bootstrap")
    numbers = [v for v, _ in present]
    low, high = bootstrap_mean_ci(numbers, resamples=resamples, seed=seed, clusters=[c for _, c in present])
    return Estimate(sum(numbers) / len(numbers), low, high, len(numbers), "bootstrap")


def _wilson_estimate(successes: int, n: int) -> Estimate:
    if n == 0:
        return Estimate(None, None, None, 0, "wilson")
    low, high = wilson_interval(successes, n)
    return Estimate(successes / n, low, high, n, "wilson")


def group_metrics(name: str, tasks: Sequence[TaskMetrics], ks: Sequence[int],
                  resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> GroupMetrics:
    """Aggregate per-task metrics: bootstrap means over tasks, Wilson for the pooled per-trial pass rate."""
    trials = sum(t.n for t in tasks)
    passes = sum(t.passes for t in tasks)
    return GroupMetrics(
        name=name, tasks=len(tasks), trials=trials, passes=passes, infra_errors=sum(t.infra_errors for t in tasks),
        mean_score=_bootstrap_estimate(((t.mean_score, t.cluster) for t in tasks), resamples, seed),
        pass_rate=_wilson_estimate(passes, trials),
        pass_at={k: _bootstrap_estimate(((t.pass_at[k], t.cluster) for t in tasks), resamples, seed) for k in ks},
        pass_hat={k: _bootstrap_estimate(((t.pass_hat[k], t.cluster) for t in tasks), resamples, seed)
                  for k in ks},
    )


def aggregate(trials: Iterable[Mapping[str, Any]], trials_per_task: int | None = None,
              ks: Sequence[int] | None = None, resamples: int = BOOTSTRAP_RESAMPLES,
              seed: int = BOOTSTRAP_SEED) -> EvalMetrics:
    """Per task, per category and overall metrics of a run's trials.

    ``trials_per_task`` is K (``meta["trials"]``); when None, the most trials any task has (infra included).
    ``ks`` defaults to 1 and K.
    """
    grouped = trials_by_task(trials)
    if trials_per_task is None:
        trials_per_task = max((len(ts) for ts in grouped.values()), default=1)
    ks = sorted(set(ks)) if ks else default_ks(trials_per_task)
    if ks[0] < 1:
        raise ValueError(f"k must be >= 1 (got {ks})")
    per_task = [task_metrics(tid, ts, ks) for tid, ts in grouped.items()]
    by_category: dict[str, list[TaskMetrics]] = {}
    by_exposure: dict[str, list[TaskMetrics]] = {}
    for t in per_task:
        by_category.setdefault(t.category, []).append(t)
        for group in exposure_groups(t.seen, t.guided):
            by_exposure.setdefault(group, []).append(t)
    return EvalMetrics(
        trials_per_task=trials_per_task, ks=list(ks),
        overall=group_metrics("overall", per_task, ks, resamples, seed),
        categories={name: group_metrics(name, by_category[name], ks, resamples, seed) for name in sorted(by_category)},
        tasks=per_task,
        exposure={name: group_metrics(name, by_exposure[name], ks, resamples, seed)
                  for name in EXPOSURE_GROUPS if name in by_exposure},
    )
