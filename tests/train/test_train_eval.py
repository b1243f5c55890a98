"""Periodic evaluation inside forge train (forge_cli/train/evaluation.py) and the per-step record
(forge_cli/train/metrics_log.py), on hand-made results and the builtin env's real splits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forge_cli.config.compose import compose
from forge_cli.envs.source import load_tasks
from forge_cli.errors import UserError
from forge_cli.rollout.result import RolloutResult
from forge_cli.train.evaluation import eval_due, eval_jobs, eval_metrics, eval_taskset
from forge_cli.train.metrics_log import MetricsLog, kept_lines, step_line


def test_eval_due_every_n_steps_and_after_the_last() -> None:
    assert [k for k in range(1, 8) if eval_due(k, 3, 7)] == [3, 6, 7]
    assert [k for k in range(1, 5) if eval_due(k, 1, 4)] == [1, 2, 3, 4]
    assert not any(eval_due(k, 0, 4) for k in range(5))


def test_eval_taskset_is_the_validation_split_not_the_training_selection() -> None:
    ids = "env.task_ids=[create-edit-touch-guided-0,search-count-count-guided-0]"
    exp = compose([ids, "trainer.eval_every=2", "trainer.eval_max_tasks=3"]).experiment
    train = load_tasks(exp.env, purpose="train")
    evalset = eval_taskset(exp, train)
    assert evalset is not None and evalset.split == "val" and len(evalset.tasks) == 3  # never the reported test split
    assert not {t.id for t in evalset.tasks} & {t.id for t in train.tasks}
    assert eval_taskset(compose([ids]).experiment, train) is None
    same = compose([ids, "trainer.eval_every=1", "trainer.eval_split=train"]).experiment
    assert [t.id for t in eval_taskset(same, train).tasks] == [t.id for t in train.tasks]  # type: ignore[union-attr]
    with pytest.raises(UserError, match="unknown split 'dev'"):
        eval_taskset(compose(["trainer.eval_every=1", "trainer.eval_split=dev"]).experiment, train)


def test_eval_jobs_carry_the_eval_temperature_and_their_own_ids() -> None:
    exp = compose(["trainer.eval_every=1", "eval.trials=2", "eval.temperature=0", "trainer.eval_max_tasks=2"])
    evalset = eval_taskset(exp.experiment, load_tasks(exp.experiment.env, purpose="train"))
    assert evalset is not None
    jobs = eval_jobs(exp.experiment, evalset, 3, "run", 1)
    assert [(j.task.id, j.sample, j.step) for j in jobs] == [
        (t.id, trial, 3) for t in evalset.tasks for trial in range(2)]
    assert {str(j.sampling) for j in jobs} == {"{'temperature': 0.0}"} and len({j.rollout_id for j in jobs}) == 4
    assert len({j.group_id for j in jobs}) == 2
    again = eval_jobs(exp.experiment, evalset, 3, "run", 2)
    assert not {j.rollout_id for j in jobs} & {j.rollout_id for j in again}, "a resumed run never reuses eval ids"
    plain = compose(["trainer.eval_every=1", "trainer.eval_max_tasks=1"]).experiment
    assert eval_jobs(plain, evalset, 1, "run", 0)[0].sampling is None, "no eval.temperature: the run's sampling"


def test_eval_metrics_leave_infra_errors_out(tmp_path: Path) -> None:
    def result(task: str, trial: int, status: str, reward: float | None, passed: bool | None) -> RolloutResult:
        return RolloutResult(rollout_id=f"{task}-{trial}", task_id=task, group_id=task, harness="react",
                             status=status, reward=reward, passed=passed, sample=trial)  # type: ignore[arg-type]

    results = [result("a", 0, "ok", 1.0, True), result("a", 1, "ok", 0.5, False),
               result("b", 0, "agent_error", 0.0, False), result("b", 1, "infra_error", None, None)]
    metrics = eval_metrics(results, 2, tmp_path / "eval")
    # counted trials 3, passes 1; mean score = mean over tasks of (0.75, 0.0)
    assert metrics == {"eval_pass_rate": pytest.approx(1 / 3), "eval_mean_score": pytest.approx(0.375),
                       "eval_tasks": 2.0, "eval_trials": 3.0, "eval_infra_errors": 1.0}
    report = json.loads((tmp_path / "eval" / "eval.json").read_text())
    assert report["overall"]["passes"] == 1 and (tmp_path / "eval" / "report.html").is_file()
    assert eval_metrics([result("c", 0, "infra_error", None, None)], 1)["eval_pass_rate"] is None


def test_metrics_log_keeps_one_line_per_completed_step(tmp_path: Path) -> None:
    lines = ['{"step": 1, "a": 1}', '{"step": 2, "a": 2}', '{"step": 3, "a": 3}', '{"step": 4, "a"']
    assert kept_lines(lines, 2, {}) == lines[:2]
    assert kept_lines(lines[:1], 2, {2: '{"step": 2, "a": 20}\n'}) == [lines[0], '{"step": 2, "a": 20}']
    assert kept_lines(lines, 0, {}) == []
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    log = MetricsLog(tmp_path, 3, {})
    log.write(4, {"a": 4, "eval_pass_rate": None})
    log.close()
    steps = [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4] and list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


def test_step_line_shows_what_applies() -> None:
    base = {"reward_mean": 0.5, "pass_rate": 0.25, "train_tokens": 120.0, "rollout_s": 30.2, "train_s": 4.4,
            "sync_s": 1.25, "weight_version": "step-2"}
    assert step_line(2, 5, base) == ("step 2/5: reward 0.500, pass rate 0.25, 120 tokens trained, rollout 30 s / "
                                     "train 4 s / sync 1.2 s, weights step-2")
    full = {**base, "dynamic_sampling": 1.0, "groups_kept": 3.0, "groups": 6.0, "dynamic_rounds": 1.0,
            "max_staleness": 1.0, "staleness_max": 1.0, "eval_pass_rate": 0.4, "eval_mean_score": 0.45,
            "eval_trials": 10.0}
    assert step_line(2, 5, full).endswith(", groups kept 3/6 (1 refill round(s)), staleness max 1 (bound 1), eval "
                                          "pass rate 0.40 (mean score 0.450, 10 trials)")
    assert step_line(2, 5, {**base, "eval_pass_rate": None, "eval_mean_score": None}).endswith(
        "eval pass rate - (mean score -, 0 trials)")
