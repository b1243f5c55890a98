"""``forge train``'s per-step record: ``metrics.jsonl``, the experiment loggers and the step line people read.

``metrics.jsonl`` is always written; each step's numeric metrics also go to the loggers ``trainer.loggers`` names
(``forge_cli/config/loggers.py``: TensorBoard by default, Weights & Biases and MLflow on request, a user's own).

``metrics.jsonl`` holds exactly one line per completed step. A step is complete once its metrics are in its
checkpoint (``checkpoints/step-N/metrics.json``); the log line follows. On ``--resume`` the log is cut back to the
steps completed (a line written after the last complete step goes) and a line lost between the checkpoint and the
log comes back from the checkpoint, so a resumed run never duplicates or misses a line.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from forge_cli.config.loggers import ExperimentLogger, logger_class
from forge_cli.errors import UserError
from forge_cli.rollout.result import RolloutResult

# a checkpoint's step metrics: written last, so its presence marks the step complete
METRICS_FILE = "metrics.json"


def _line_step(line: str) -> int | None:
    """The step of a complete JSON line of the log (None: a torn or foreign line)."""
    try:
        step = json.loads(line).get("step")
    except (ValueError, AttributeError):
        return None
    return step if isinstance(step, int) else None


def step_rows(run_dir: Path) -> dict[int, dict[str, Any]]:
    """The metrics of each step of a run's ``metrics.jsonl`` (step -> its line; a step written twice: the later
    line; torn or foreign lines skipped; {} when there is no log). For readers of a run: the budget a resumed run
    already spent, a benchmark's per-arm totals."""
    log = run_dir / "metrics.jsonl"
    rows: dict[int, dict[str, Any]] = {}
    for line in log.read_text().splitlines() if log.is_file() else []:
        step = _line_step(line)
        if step is not None:
            rows[step] = json.loads(line)
    return rows


def kept_lines(lines: Iterable[str], done: int, restore: Mapping[int, str]) -> list[str]:
    """The log of a run resumed after step ``done``: lines of steps 1..done in order, each once (the first one
    read), a missing one taken from ``restore`` (step -> the line its checkpoint kept) when it has it."""
    by_step: dict[int, str] = {}
    for line in lines:
        step = _line_step(line)
        if step is not None and 1 <= step <= done and step not in by_step:
            by_step[step] = line.strip()
    for step, line in restore.items():
        if 1 <= step <= done and step not in by_step:
            by_step[step] = line.strip()
    return [by_step[step] for step in sorted(by_step)]


def logger_classes(names: Sequence[str]) -> list[type[ExperimentLogger]]:
    """The logger classes ``names`` (``trainer.loggers``) registered, each with its client installed: a UserError
    (exit 2) naming the registered ones, or saying what to install, otherwise (checked before a run starts)."""
    classes = []
    for name in names:
        try:
            cls = logger_class(name)
        except ValueError as exc:
            raise UserError(f"trainer.loggers: {exc}", fix="name registered loggers in trainer.loggers",
                            exit_code=2) from None
        cls.check()
        classes.append(cls)
    return classes


class MetricsLog:
    """``metrics.jsonl`` and the experiment loggers ``loggers`` names, one record per step (thread-safe: the update
    pipeline writes from its worker). ``run_name`` and ``config`` (the composed experiment) go to the loggers."""

    def __init__(self, run_dir: Path, done: int | None = None, restore: Mapping[int, str] | None = None, *,
                 loggers: Sequence[str] = ("tensorboard",), run_name: str | None = None,
                 config: Mapping[str, Any] | None = None) -> None:
        self.path = run_dir / "metrics.jsonl"
        self._lock = threading.Lock()
        classes = logger_classes(loggers)
        if done is not None:
            old = self.path.read_text(encoding="utf-8").splitlines() if self.path.is_file() else []
            kept = kept_lines(old, done, restore or {})
            self.path.write_text("".join(f"{line}\n" for line in kept), encoding="utf-8")
        self.loggers: list[ExperimentLogger] = []
        try:
            for cls in classes:
                logger = cls()
                try:
                    logger.start(run_dir, run_name or run_dir.name, dict(config or {}))
                except UserError:
                    raise
                except Exception as exc:  # the tracker's own error (a bad WANDB_MODE, an unreachable server)
                    raise UserError(f"trainer.loggers: the {cls.name} logger could not start: "
                                    f"{type(exc).__name__}: {exc}", fix=f"leave {cls.name} out of trainer.loggers, "
                                    "or fix its settings (docs/training.md, Experiment loggers)",
                                    exit_code=2) from None
                self.loggers.append(logger)
        except BaseException:
            self.close()
            raise

    def write(self, step: int, metrics: Mapping[str, Any]) -> None:
        scalars = {key: value for key, value in metrics.items()
                   if isinstance(value, int | float) and not isinstance(value, bool)}
        with self._lock:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"step": step, **metrics}) + "\n")
            for logger in self.loggers:
                logger.log(step, scalars)

    def close(self) -> None:
        """Close every logger (each once; the first error is raised after all are closed)."""
        loggers, self.loggers = self.loggers, []
        error: BaseException | None = None
        for logger in loggers:
            try:
                logger.close()
            except Exception as exc:
                error = error or exc
        if error is not None:
            raise error


def rollout_metrics(results: list[RolloutResult]) -> dict[str, float]:
    """Reward mean, pass rate, rollouts by status and completion tokens of a step's rollouts."""
    rewards = [r.reward for r in results if r.reward is not None]
    statuses: dict[str, float] = {}
    for r in results:
        statuses[f"rollouts_{r.status}"] = statuses.get(f"rollouts_{r.status}", 0) + 1
    return {"reward_mean": sum(rewards) / len(rewards) if rewards else 0.0,
            "pass_rate": sum(1 for r in results if r.passed) / len(results) if results else 0.0,
            "rollouts": float(len(results)), **statuses,
            "rollout_completion_tokens": float(sum(r.completion_tokens for r in results))}


def step_line(step: int, steps: int, m: Mapping[str, Any]) -> str:
    """The line printed when a step completes: rewards, tokens trained, the time split and weight version, then
    what applies: groups with signal (dynamic sampling), the staleness observed (max_staleness), the evaluation."""
    line = (f"step {step}/{steps}: reward {m.get('reward_mean', 0.0):.3f}, pass rate {m.get('pass_rate', 0.0):.2f}, "
            f"{int(m.get('train_tokens', 0))} tokens trained, rollout {m.get('rollout_s', 0.0):.0f} s / train "
            f"{m.get('train_s', 0.0):.0f} s / sync {m.get('sync_s', 0.0):.1f} s, weights {m.get('weight_version')}")
    if m.get("dynamic_sampling"):
        line += (f", groups kept {int(m.get('groups_kept', 0))}/{int(m.get('groups', 0))}"
                 f" ({int(m.get('dynamic_rounds', 0))} refill round(s))")
    if m.get("max_staleness"):
        line += f", staleness max {int(m.get('staleness_max', 0))} (bound {int(m['max_staleness'])})"
    if "eval_pass_rate" in m:
        rate, score = m.get("eval_pass_rate"), m.get("eval_mean_score")
        shown = "-" if rate is None else f"{rate:.2f}"
        line += (f", eval pass rate {shown} (mean score {'-' if score is None else f'{score:.3f}'}, "
                 f"{int(m.get('eval_trials', 0))} trials)")
    return line
