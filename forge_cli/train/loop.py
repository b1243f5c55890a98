"""``forge train``: the step loop on one machine.

One step: ``trainer.tasks_per_step`` tasks from the env's train split (a seeded order, reshuffled each pass) ->
``algo.group_size`` rollouts each (one group) through the harness, sandbox and proxy -> verifier rewards -> DAPO
dynamic sampling (``forge_cli/train/dynamic.py``: groups without signal dropped or refilled, per
``algo.dynamic_sampling``) -> samples from the recorded tokens (``forge_cli/train/samples.py``) -> advantages -> one
policy update (the trainer backend) -> the new weights served (proxy paused while the policy server reloads them;
the proxy stamps the new version on every later record) -> next step. With ``trainer.max_staleness`` N >= 1 the
next step's rollouts start while the update and sync run, at most N updates behind (``forge_cli/train/pipeline.py``
runs the updates and checks every record's weight version against the bound). Every ``trainer.eval_every`` steps
the eval split runs at ``eval.temperature`` (``forge_cli/train/evaluation.py``). The session (policy server, proxy,
tool server, sandboxes) lives for the run.

The run directory adds to ``forge rollout``'s: ``metrics.jsonl`` (one line per step, ``forge_cli/train/metrics_log
.py``), ``tensorboard/`` (event files), ``checkpoints/step-N/`` (servable HF directories with the trainer state, the
last ``trainer.keep_checkpoints`` kept) and ``eval/step-N/`` (evaluation results and reports). A checkpoint gets
``pending.json`` (the update's metrics) once it is saved and ``metrics.json`` once its step is complete (weights
served, evaluation done, metrics line next). ``forge train --resume RUN_DIR`` continues from the newest checkpoint
with either file, with the same task order: a pending one is served, evaluated when due and completed first.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forge_cli.config.schema import Experiment
from forge_cli.envs.source import TaskSet, load_tasks
from forge_cli.envs.task import Task
from forge_cli.errors import UserError
from forge_cli.rollout.reader import RunRollout, read_run
from forge_cli.rollout.result import RolloutResult
from forge_cli.rollout.session import RolloutSession
from forge_cli.serve.counters import delta as counter_delta
from forge_cli.serve.counters import read_counters
from forge_cli.train.backend import TrainerBackend, backend_class
from forge_cli.train.evaluation import eval_due, eval_taskset, run_evaluation
from forge_cli.train.local import iter_checkpoints
from forge_cli.train.metrics_log import METRICS_FILE, MetricsLog, rollout_metrics, step_line, step_rows
from forge_cli.train.pipeline import UpdatePipeline, staleness

Say = Callable[[str], None]
# a checkpoint's update metrics, written once it is saved: its step is done but for the weight sync, evaluation
# and metrics line (which --resume completes)
PENDING_FILE = "pending.json"


def task_order(tasks: list[Task], seed: int, step: int, per_step: int) -> list[Task]:
    """The tasks of ``step``: consecutive slices of a seeded shuffle of the task list, reshuffled every pass, so the
    order depends only on (seed, step) and a resumed run sees the same tasks."""
    picked: list[Task] = []
    position = step * per_step
    while len(picked) < per_step:
        epoch, offset = divmod(position, len(tasks))
        order = list(tasks)
        random.Random(f"{seed}:{epoch}").shuffle(order)
        picked.append(order[offset])
        position += 1
    return picked


def model_directory(exp: Experiment) -> Path:
    """The HF directory the trainer starts from (the same weights the policy server serves)."""
    from forge_cli.config.schema import OpenAICompatibleModel
    from forge_cli.serve.prepare import resolve_model

    if isinstance(exp.model, OpenAICompatibleModel):
        raise UserError("forge train needs weights it can update: model=openai-compatible serves a policy forge "
                        "cannot train", fix="use the default model, or model=vllm model.path=DIR", exit_code=2)
    return resolve_model(exp.model).path


def checkpoint_step(path: Path) -> int:
    return int(path.name.split("-", 1)[1])


def resume_point(checkpoints: Path) -> Path | None:
    """The newest checkpoint whose update finished (complete, or pending its sync/evaluation/metrics line)."""
    done = [p for p in iter_checkpoints(checkpoints) if (p / METRICS_FILE).is_file() or (p / PENDING_FILE).is_file()]
    return done[-1] if done else None


@dataclass
class Update:
    """What a step hands to its update: the rollouts to train on and the metrics measured so far."""

    step: int  # 0-based; the update makes version step + 1
    rollouts: list[RunRollout]
    metrics: dict[str, Any]
    started: float  # when the step's rollouts started (time.monotonic)


class StepLoop:
    """The steps of one run inside its session: rollouts and dynamic sampling on the calling thread, updates
    through an :class:`UpdatePipeline`, evaluation and step completion."""

    def __init__(self, exp: Experiment, session: RolloutSession, trainer: TrainerBackend, taskset: TaskSet,
                 evalset: TaskSet | None, log: MetricsLog, say: Say, served: int, spent: float = 0.0) -> None:
        self.exp, self.session, self.trainer, self.taskset, self.evalset = exp, session, trainer, taskset, evalset
        self.log, self.say = log, say
        # completion tokens the policy server sampled in this run's steps so far (trainer.max_sampled_tokens)
        self.spent = spent
        self.stopped_by_budget = False
        # the run's last step (1-based): trainer.steps, or the step that spends the budget (evaluated after it)
        self.last_step = exp.trainer.steps
        self.checkpoints = session.run_dir / "checkpoints"
        self.pending: dict[int, dict[str, Any]] = {}
        self.last_eval: dict[str, Any] = {}
        self.pipeline: UpdatePipeline[Update] = UpdatePipeline(self.update, exp.trainer.max_staleness, served, say)

    # ------------------------------------------------------------------ main thread
    def run(self, start: int) -> None:
        exp, bound, budget = self.exp, self.exp.trainer.max_staleness, self.exp.trainer.max_sampled_tokens
        try:
            for step in range(start, exp.trainer.steps):
                if budget is not None and self.spent >= budget:
                    self.stopped_by_budget = True
                    self.say(f"the budget of {budget} sampled tokens was spent before step {step + 1} "
                             f"({self.spent:.0f}): stopping")
                    break
                waited = time.monotonic()
                self.pipeline.wait_served(step - bound)
                update = self.rollouts(step, waited)
                self.spent += update.metrics.get("sampled_tokens", 0.0)
                update.metrics["sampled_tokens_total"] = self.spent
                last = budget is not None and self.spent >= budget
                if last:  # this step is the run's last: no rollouts of a next step start meanwhile
                    self.stopped_by_budget, self.last_step = True, step + 1
                    self.say(f"step {step + 1} reached the budget of {budget} sampled tokens ({self.spent:.0f}): "
                             "it is the last step")
                self.pipeline.submit(update)
                if eval_due(step + 1, exp.trainer.eval_every, self.last_step):
                    # the evaluation sees exactly this step's weights: no later update runs meanwhile
                    self.pipeline.drain()
                    self.complete(step + 1, self.pending.pop(step + 1), evaluate=True)
                if last:
                    break
            self.pipeline.drain()
            self.pipeline.close()
        except BaseException:
            self.pipeline.stop()
            raise

    def rollouts(self, step: int, waited: float) -> Update:
        """Run the step's groups (and refills), check the records' staleness, pick the rollouts to train on."""
        from forge_cli.train.dynamic import sample_step
        from forge_cli.train.step import check_policy_server

        exp, session = self.exp, self.session
        t0 = time.monotonic()
        counted = read_counters(session.upstream)
        tasks = task_order(self.taskset.tasks, exp.run.seed, step, exp.trainer.tasks_per_step)
        progress = _progress(self.say, step, exp.trainer.steps)
        jobs, results, selection = sample_step(
            exp, self.taskset.tasks, tasks, step, session.run_id, session.incarnation,
            run=lambda batch: session.run(batch, on_result=progress),
            make_jobs=lambda picked: session.jobs(picked, exp.algo.group_size, step=step), say=self.say)
        t1 = time.monotonic()
        # the policy server gone mid-step: stop with the resume command, train nothing of this step
        check_policy_server(session.upstream, results, session.run_dir, step)
        ids = {j.rollout_id for j in jobs}
        rollouts = [r for r in read_run(session.run_dir, step=step) if r.result.rollout_id in ids]
        kept = set(selection.kept)
        metrics = {**rollout_metrics(results), **selection.metrics(),
                   **staleness(rollouts, step, exp.trainer.max_staleness),
                   "rollout_s": t1 - t0, "wait_s": t0 - waited}
        metrics["rollout_tokens_per_s"] = metrics["rollout_completion_tokens"] / max(t1 - t0, 1e-9)
        chosen = [r for r in rollouts if r.result.group_id in kept]
        if exp.algo.branch_at != "off":
            from forge_cli.train.branching import branch_step

            branches, branch_metrics = branch_step(
                session, rollouts, {t.id: t for t in self.taskset.tasks}, exp, step,
                run=lambda batch: session.run(batch, on_result=progress))
            chosen += branches
            metrics.update(branch_metrics, branch_s=time.monotonic() - t1)
        # what the policy server did for this step's rollouts (and branches), by its own counters
        metrics.update(counter_delta(counted, read_counters(session.upstream)))
        return Update(step, chosen, metrics, t0)

    # ------------------------------------------------------------------ the update (worker or inline)
    def update(self, u: Update) -> int:
        """Train on the step, save and serve its checkpoint; complete the step unless its evaluation is due (the
        main thread does that). Returns the version now served."""
        from forge_cli.train.step import train_on_step

        t1 = time.monotonic()
        metrics = {**u.metrics, **train_on_step(self.trainer, u.rollouts, self.exp)}
        t2 = time.monotonic()
        k = u.step + 1
        ckpt = self.checkpoints / f"step-{k}"
        self.trainer.save(ckpt)
        metrics["train_s"] = t2 - t1
        (ckpt / PENDING_FILE).write_text(json.dumps(metrics) + "\n")
        metrics["weight_version"] = _serve(self.session, ckpt, self.say, f"step-{k}")
        t3 = time.monotonic()
        metrics.update({"sync_s": t3 - t2, "step_s": t3 - u.started})
        if eval_due(k, self.exp.trainer.eval_every, self.last_step):
            self.pending[k] = metrics
        else:
            self.complete(k, metrics, evaluate=False)
        return k

    def complete(self, k: int, metrics: dict[str, Any], *, evaluate: bool) -> None:
        """Step ``k`` (1-based) is done once its metrics are in its checkpoint; the log line follows (a resume
        restores a line lost in between from there)."""
        if evaluate and self.evalset is not None:
            self.last_eval = run_evaluation(self.session, self.exp, self.evalset, k, self.say)
            metrics = {**metrics, **self.last_eval}
        ckpt = self.checkpoints / f"step-{k}"
        (ckpt / METRICS_FILE).write_text(json.dumps({"step": k, **metrics}) + "\n")
        self.log.write(k, metrics)
        _prune(self.checkpoints, self.exp.trainer.keep_checkpoints, self.exp.trainer.save_every)
        self.say(step_line(k, self.exp.trainer.steps, metrics))

    def resume_pending(self, ckpt: Path) -> None:
        """A checkpoint saved by an update whose step did not complete: serve it, evaluate when due, complete it."""
        k = checkpoint_step(ckpt)
        metrics = json.loads((ckpt / PENDING_FILE).read_text())
        t0 = time.monotonic()
        metrics["weight_version"] = _serve(self.session, ckpt, self.say, f"step-{k}")
        metrics["sync_s"] = time.monotonic() - t0
        self.say(f"completing step {k} from its checkpoint")
        budget = self.exp.trainer.max_sampled_tokens
        if budget is not None and self.spent >= budget:  # the step that spent the budget: the run's last
            self.last_step = k
        self.complete(k, metrics, evaluate=eval_due(k, self.exp.trainer.eval_every, self.last_step))


def run_training(exp: Experiment, data: dict[str, Any], say: Say, *, resume: Path | None = None) -> dict[str, Any]:
    """Train for ``trainer.steps`` steps (or the rest of them, resuming); returns the run's summary."""
    taskset = load_tasks(exp.env, exp.rollout.max_tasks, purpose="train")
    evalset = eval_taskset(exp, taskset)
    backend_cls = backend_class(exp.trainer.kind)
    model_dir = model_directory(exp)
    relay = None
    if exp.algo.branch_at != "off":  # the branches' prefixes are answered by a replay upstream (docs/branching.md)
        from forge_cli.replay.run import replay_relay

        relay = replay_relay(exp, model_dir)
    session = RolloutSession(exp, data, _with_tasks(taskset, evalset), say, run_dir=resume, relay=relay)
    checkpoints = session.run_dir / "checkpoints"
    last = resume_point(checkpoints) if resume else None
    trainer = backend_cls(model_dir, exp.trainer, exp.algo, device=getattr(exp.model, "device", "cpu"),
                          seed=exp.run.seed)
    start = 0
    if last is not None:
        trainer.load(last)
        start = checkpoint_step(last)
        say(f"resuming after step {start} from {last}")
    elif resume:
        say("no checkpoint yet: starting from step 0")
    pending = last is not None and not (last / METRICS_FILE).is_file()
    started = time.monotonic()
    with session:
        restore = {checkpoint_step(p): (p / METRICS_FILE).read_text() for p in iter_checkpoints(checkpoints)
                   if (p / METRICS_FILE).is_file()}
        metrics_log = MetricsLog(session.run_dir, start - int(pending) if resume else None, restore,
                                 loggers=exp.trainer.loggers, run_name=session.run_id, config=data)
        loop = StepLoop(exp, session, trainer, taskset, evalset, metrics_log, say, served=start,
                        spent=_spent(session.run_dir, last, start) if last is not None else 0.0)
        if exp.trainer.max_sampled_tokens is not None and not read_counters(session.upstream):
            raise UserError(f"trainer.max_sampled_tokens counts the policy server's own sampled tokens, and the "
                            f"server at {session.upstream} exposes no vLLM counters (/metrics)",
                            fix="leave trainer.max_sampled_tokens unset (train trainer.steps steps), or serve the "
                                "policy with forge's vLLM", exit_code=2)
        try:
            if last is not None and pending:
                loop.resume_pending(last)
            elif last is not None:
                _serve(session, last, say, f"step-{start}")
            loop.run(start)
        finally:
            metrics_log.close()
    summary = {"run_id": session.run_id, "run_dir": str(session.run_dir), "steps": exp.trainer.steps,
               "metrics": str(session.run_dir / "metrics.jsonl"),
               "tensorboard": str(session.run_dir / "tensorboard"),
               "checkpoints": [str(p) for p in iter_checkpoints(checkpoints)],
               "duration_s": round(time.monotonic() - started, 1), "sampled_tokens": loop.spent,
               "max_sampled_tokens": exp.trainer.max_sampled_tokens, "stopped_by_budget": loop.stopped_by_budget,
               **loop.last_eval}
    (session.run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _spent(run_dir: Path, last: Path, start: int) -> float:
    """The sampled tokens of the steps a resumed run already did (1..start): metrics.jsonl's lines, the last one of
    a step written twice winning, and the pending checkpoint's metrics for a step whose line is not written yet."""
    per_step = {step: float(row.get("sampled_tokens") or 0.0) for step, row in step_rows(run_dir).items()
                if step <= start}
    if (last / PENDING_FILE).is_file():
        per_step[start] = float(json.loads((last / PENDING_FILE).read_text()).get("sampled_tokens") or 0.0)
    return sum(per_step.values())


def _with_tasks(taskset: TaskSet, evalset: TaskSet | None) -> TaskSet:
    """The training tasks plus the evaluation's (the session builds images and starts a tool server for all)."""
    if evalset is None:
        return taskset
    known = {t.id for t in taskset.tasks}
    extra = [t for t in evalset.tasks if t.id not in known]
    return TaskSet(tasks=[*taskset.tasks, *extra], split=taskset.split, note=taskset.note, source=taskset.source)


def _progress(say: Say, step: int, steps: int) -> Callable[[RolloutResult, int, int], None]:
    """One line per finished rollout (visible when the output is not a terminal too)."""

    def line(result: RolloutResult, done: int, total: int) -> None:
        reward = "-" if result.reward is None else f"{result.reward:g}"
        say(f"step {step + 1}/{steps}: {done}/{total} {result.task_id}: {result.status} reward {reward}")

    return line


def _serve(session: RolloutSession, checkpoint: Path, say: Say, version: str) -> str:
    """The policy server reloads ``checkpoint`` while the proxy holds new calls; later records carry ``version``.
    A failed update (the server gone) stops the run with the resume command: the checkpoint is already saved."""
    from forge_cli.serve.weights import update_weights
    from forge_cli.train.step import policy_server_sync

    proxy = session.proxy
    proxy.pause()
    try:
        with policy_server_sync(session.upstream, session.run_dir, checkpoint_step(checkpoint)):
            served = update_weights(session.upstream, checkpoint, version=version)
        proxy.set_weight_version(served)
    finally:
        proxy.resume()
    return served


def _prune(root: Path, keep: int, every: int) -> None:
    """Remove all but the newest ``keep`` checkpoints, except every ``every``-th step's."""
    for old in list(iter_checkpoints(root))[:-keep]:
        if every and checkpoint_step(old) % every == 0:
            continue
        shutil.rmtree(old, ignore_errors=True)
