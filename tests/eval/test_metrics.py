"""``forge_cli.eval.metrics``: pass@k / pass^k against hand-computed cases, aggregation, infra errors, intervals."""

from __future__ import annotations

import math

import pytest

from forge_cli.eval.metrics import (
    aggregate,
    bootstrap_mean_ci,
    pass_at_k,
    pass_at_k_claw_eval,
    pass_hat_k,
    pass_hat_k_claw_eval,
    pass_hat_k_unbiased,
    task_metrics,
    wilson_interval,
)
from tests.eval import task_trials, trial


@pytest.mark.parametrize(("n", "c", "k", "expected"), [
    (5, 2, 3, 0.9),           # 1 - C(3,3)/C(5,3) = 1 - 1/10
    (4, 3, 2, 1.0),           # C(1,2) = 0: any 2 of 4 include a pass
    (10, 3, 2, 24 / 45),      # 1 - C(7,2)/C(10,2) = 1 - 21/45
    (3, 0, 3, 0.0),           # all fail
    (3, 3, 3, 1.0),           # all pass
    (3, 1, 3, 1.0),           # n == k: any pass
    (1000, 1, 500, 0.5),      # 1 - C(999,500)/C(1000,500) = 1 - 500/1000, stable at large n
])
def test_pass_at_k_hand_computed(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(("n", "c", "k", "expected"), [
    (5, 2, 3, 0.0),           # C(2,3) = 0: fewer passes than k
    (4, 3, 2, 0.5),           # C(3,2)/C(4,2) = 3/6
    (10, 3, 2, 3 / 45),       # C(3,2)/C(10,2)
    (5, 4, 3, 0.4),           # C(4,3)/C(5,3) = 4/10
    (3, 0, 3, 0.0),
    (3, 3, 3, 1.0),
    (3, 2, 3, 0.0),           # n == k: all must pass
])
def test_pass_hat_k_hand_computed(n: int, c: int, k: int, expected: float) -> None:
    assert pass_hat_k(n, c, k) == pytest.approx(expected, abs=1e-12)
    assert pass_hat_k_unbiased(n, c, k) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_k_one_is_the_pass_fraction(n: int) -> None:
    for c in range(n + 1):
        assert pass_at_k(n, c, 1) == pytest.approx(c / n)
        assert pass_hat_k(n, c, 1) == pytest.approx(c / n)


def test_product_forms_equal_the_binomial_formulas() -> None:
    for n in range(1, 12):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), abs=1e-12)
                assert pass_hat_k_unbiased(n, c, k) == pytest.approx(math.comb(c, k) / math.comb(n, k), abs=1e-12)


def test_claw_eval_rule_equals_the_unbiased_estimators_at_n_equals_k() -> None:
    for k in range(1, 8):
        for c in range(k + 1):
            assert pass_hat_k_claw_eval(k, c, k) == pass_hat_k_unbiased(k, c, k) == pass_hat_k(k, c, k)
            assert pass_at_k_claw_eval(k, c, k) == pass_at_k(k, c, k)


@pytest.mark.parametrize("fn", [pass_at_k, pass_hat_k, pass_hat_k_unbiased, pass_hat_k_claw_eval, pass_at_k_claw_eval])
def test_bad_counts_raise(fn: object) -> None:
    assert callable(fn)
    with pytest.raises(ValueError, match="at least k"):
        fn(2, 1, 3)  # n < k
    with pytest.raises(ValueError, match="more passes"):
        fn(3, 4, 3)  # c > n
    with pytest.raises(ValueError):
        fn(3, 1, 0)  # k < 1


def test_claw_eval_rule_is_only_defined_for_n_equals_k() -> None:
    with pytest.raises(ValueError, match="exactly k"):
        pass_hat_k_claw_eval(5, 5, 3)
    with pytest.raises(ValueError, match="exactly k"):
        pass_at_k_claw_eval(5, 5, 3)


def test_against_claw_eval_definition() -> None:
    """Reproduce Claw-Eval's batch summary on a hand-made run and get the same counts.

    Read in claw-eval/claw-eval at 9365e1a, ``src/claw_eval/cli.py``, ``cmd_batch``::

        trials_list = res["trials"]
        score_sum += sum(tr["task_score"] for tr in trials_list) / len(trials_list)
        if all(tr["passed"] for tr in trials_list):
            n_pass_hat += 1
        if any(tr["passed"] for tr in trials_list):
            n_pass_at += 1
        ...
        print(f"  pass^{trials}: {n_pass_hat}/{finished_tasks}")
        print(f"  pass@{trials}: {n_pass_at}/{finished_tasks}")

    where a trial's ``passed`` is ``is_pass(task_score)``, ``task_score >= 0.75`` (``models/scoring.py``), and
    the average score is ``score_sum / finished_tasks``.
    """
    scores = {
        "T1": [0.9, 0.8, 1.0],   # all pass
        "T2": [0.9, 0.2, 0.75],  # 2 of 3 (0.75 is a pass)
        "T3": [0.1, 0.0, 0.5],   # none
        "T4": [0.0, 0.8, 0.3],   # 1 of 3
    }
    trials = [trial(tid, i, s >= 0.75, s) for tid, ss in scores.items() for i, s in enumerate(ss)]

    # Claw-Eval's counting, as in cmd_batch
    n_pass_hat = n_pass_at = 0
    score_sum = 0.0
    for ss in scores.values():
        passed = [s >= 0.75 for s in ss]
        score_sum += sum(ss) / len(ss)
        n_pass_hat += all(passed)
        n_pass_at += any(passed)
    assert (n_pass_hat, n_pass_at) == (1, 3)

    m = aggregate(trials, trials_per_task=3)
    assert m.ks == [1, 3]
    assert m.overall.pass_hat[3].value == pytest.approx(n_pass_hat / len(scores))
    assert m.overall.pass_at[3].value == pytest.approx(n_pass_at / len(scores))
    assert m.overall.mean_score.value == pytest.approx(score_sum / len(scores))
    for t in m.tasks:
        assert t.pass_hat[3] == pass_hat_k_claw_eval(t.n, t.passes, 3)
        assert t.pass_at[3] == pass_at_k_claw_eval(t.n, t.passes, 3)


def test_aggregation_per_task_category_and_overall() -> None:
    trials = [
        *task_trials("a1", [True, True, False, False], category="alpha"),    # n=4 c=2
        *task_trials("a2", [True, True, True, True], category="alpha"),      # n=4 c=4
        *task_trials("b1", [False, False, False, True], category="beta"),    # n=4 c=1
    ]
    m = aggregate(trials, trials_per_task=4)
    assert m.ks == [1, 4]
    assert [t.task_id for t in m.tasks] == ["a1", "a2", "b1"]
    a1 = m.tasks[0]
    assert (a1.n, a1.passes, a1.infra_errors, a1.mean_score, a1.pass_rate) == (4, 2, 0, 0.5, 0.5)
    assert a1.pass_at == {1: 0.5, 4: 1.0}
    assert a1.pass_hat == {1: 0.5, 4: 0.0}

    assert list(m.categories) == ["alpha", "beta"]
    alpha = m.categories["alpha"]
    assert (alpha.tasks, alpha.trials, alpha.passes) == (2, 8, 6)
    assert alpha.mean_score.value == pytest.approx(0.75)
    assert alpha.pass_at[1].value == pytest.approx(0.75)
    assert alpha.pass_hat[4].value == pytest.approx(0.5)   # a2 only
    assert alpha.pass_rate.value == pytest.approx(6 / 8)

    overall = m.overall
    assert (overall.tasks, overall.trials, overall.passes, overall.infra_errors) == (3, 12, 7, 0)
    assert overall.pass_at[1].value == pytest.approx((0.5 + 1 + 0.25) / 3)
    assert overall.pass_at[4].value == pytest.approx(1.0)
    assert overall.pass_hat[4].value == pytest.approx(1 / 3)
    assert overall.pass_rate.value == pytest.approx(7 / 12)
    assert overall.pass_rate.method == "wilson" and overall.mean_score.method == "bootstrap"


def test_scores_are_rewards_and_none_counts_as_zero() -> None:
    trials = [trial("t", 0, True, 0.8), trial("t", 1, False, 0.4), trial("t", 2, False, None, status="agent_error")]
    t = task_metrics("t", trials, [1])
    assert t.n == 3 and t.passes == 1
    assert t.mean_score == pytest.approx(0.4)  # (0.8 + 0.4 + 0) / 3


def test_infra_trials_are_left_out_and_counted() -> None:
    trials = [
        trial("t", 0, True),
        trial("t", 1, None, status="infra_error"),
        trial("t", 2, False),
        trial("u", 0, None, status="timeout"),          # never verified: passed None
        trial("u", 1, False, status="timeout"),
        trial("u", 2, True),
    ]
    m = aggregate(trials, trials_per_task=3)
    t, u = m.tasks
    assert (t.n, t.passes, t.infra_errors) == (2, 1, 1)
    assert t.pass_at[1] == 0.5
    assert t.pass_at[3] is None and t.pass_hat[3] is None  # n < k: not estimable
    assert (u.n, u.passes, u.infra_errors) == (2, 1, 1)
    assert m.overall.infra_errors == 2
    assert m.overall.trials == 4
    assert m.overall.pass_rate.value == pytest.approx(0.5)
    assert m.overall.pass_at[3].n == 0 and m.overall.pass_at[3].value is None
    assert m.overall.pass_at[1].n == 2


def test_all_infra_task_has_no_metrics() -> None:
    m = aggregate([trial("t", 0, None, status="infra_error"), trial("u", 0, True)], trials_per_task=1)
    t = m.tasks[0]
    assert (t.n, t.mean_score, t.pass_rate, t.pass_at, t.pass_hat) == (0, None, None, {1: None}, {1: None})
    assert m.overall.mean_score.value == 1.0 and m.overall.mean_score.n == 1


def test_k_defaults_to_the_most_trials_a_task_has() -> None:
    m = aggregate(task_trials("t", [True, False]) + task_trials("u", [True]))
    assert m.trials_per_task == 2 and m.ks == [1, 2]
    assert m.tasks[1].pass_at[2] is None


def test_confidence_intervals_contain_the_estimate_and_are_deterministic() -> None:
    trials = [trial(f"t{i}", j, (i * 7 + j * 3) % 5 < 2, category=f"c{i % 3}") for i in range(20) for j in range(3)]
    first, second = aggregate(trials, trials_per_task=3), aggregate(trials, trials_per_task=3)
    assert first.to_dict() == second.to_dict()
    groups = [first.overall, *first.categories.values()]
    for g in groups:
        for e in [g.mean_score, g.pass_rate, *g.pass_at.values(), *g.pass_hat.values()]:
            assert e.value is not None and e.low is not None and e.high is not None
            assert 0.0 <= e.low <= e.value <= e.high <= 1.0
    # the overall interval is a real interval over 20 tasks with mixed outcomes
    mean = first.overall.mean_score
    assert mean.low is not None and mean.value is not None and mean.high is not None
    assert mean.low < mean.value < mean.high


def test_bootstrap_is_seeded() -> None:
    values = [0.0, 1.0, 0.5, 0.25, 1.0, 0.0, 0.75]
    assert bootstrap_mean_ci(values) == bootstrap_mean_ci(values)
    assert bootstrap_mean_ci([0.3, 0.3, 0.3]) == (pytest.approx(0.3), pytest.approx(0.3))
    with pytest.raises(ValueError):
        bootstrap_mean_ci([])


def test_wilson_interval_known_values() -> None:
    assert wilson_interval(5, 10) == (pytest.approx(0.2366, abs=1e-4), pytest.approx(0.7634, abs=1e-4))
    assert wilson_interval(0, 10) == (0.0, pytest.approx(0.2775, abs=1e-4))
    low, high = wilson_interval(10, 10)
    assert low == pytest.approx(0.7225, abs=1e-4) and high == 1.0
    with pytest.raises(ValueError):
        wilson_interval(1, 0)


def test_to_dict_is_json_ready() -> None:
    d = aggregate(task_trials("t", [True, False, True]), trials_per_task=3).to_dict()
    assert set(d["overall"]["pass_at"]) == {"1", "3"}
    assert d["tasks"][0]["pass_hat"] == {"1": pytest.approx(2 / 3), "3": 0.0}
    assert d["overall"]["pass_rate"]["method"] == "wilson"
