"""``forge distill``: teacher trajectories through the real harness, kept by reward, as SFT samples for the student.

The env's **train** tasks run through the harness exactly as in training (same sandboxes, capture proxy, wire-format
translations, verifiers), with the model calls served by a **teacher**: any OpenAI-compatible endpoint (a frontier
API, a large model on a GPU; ``benchmarks/teacher_standin.py`` stands in for one in tests and benchmarks). Each
task runs ``trials`` times; rollouts whose reward reaches ``min_reward`` are kept (rejection sampling) and written
as SFT samples in the student's tokens (``forge_cli/train/sft.py``), ready for ``forge sft``.

- **Evaluation tasks are refused**: a split named val, validation, test or eval exits 2 (training on them would
  make every later figure on them worthless).
- **The teacher's key** is read from the environment variable ``key_env`` by the capture proxy alone, which sends
  it upstream as ``Authorization: Bearer``; it is never on a command line, in a record, a log or a sandbox (each
  rollout has its own key at the proxy).
- **Records of an API** hold the request (messages, tools) and the answer as the harness received it, and the
  usage counts; with ``token_ids`` off (the default) the proxy asks the endpoint for no token ids or logprobs (an
  API such as OpenAI's refuses fields it does not know).
- **Spending**: ``max_tokens`` caps the teacher's tokens (prompt + completion, from its usage counts), and
  ``max_cost`` its cost in USD at ``price`` (USD per million prompt and per million completion tokens: the
  endpoint's list price, which forge cannot look up); rollouts run in batches of ``rollout.concurrency`` and no
  new batch starts once a cap is reached (the overshoot is at most one batch). A rollout that ends ``infra_error``
  (the endpoint refused or failed: a 429, a 5xx) is run again up to ``retries`` times, after 2, 4, 8 ... seconds.

The run directory is a ``forge rollout`` run's (``results.jsonl``, ``traces.sqlite``, per-rollout logs) plus
``distill.json`` (the summary) and, by default, ``sft.parquet``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from forge_cli.config.schema import Experiment
from forge_cli.errors import UserError

EVAL_SPLITS = frozenset({"val", "validation", "test", "eval", "dev"})
SUMMARY = "distill.json"


@dataclass(frozen=True)
class DistillOptions:
    teacher_url: str
    teacher_model: str
    key_env: str | None = None
    token_ids: bool = False
    trials: int = 1
    min_reward: float = 1.0
    max_tokens: int | None = None
    retries: int = 2
    out: str | None = None
    max_cost: float | None = None  # USD, at ``price``
    price: tuple[float, float] | None = None  # USD per million prompt tokens, per million completion tokens


@dataclass
class Spending:
    """The teacher's tokens so far and what they cost at the options' price."""

    prompt: int = 0
    completion: int = 0

    def add(self, results: list[Any]) -> None:
        self.prompt += sum(r.prompt_tokens for r in results)
        self.completion += sum(r.completion_tokens for r in results)

    def cost(self, options: DistillOptions) -> float | None:
        if options.price is None:
            return None
        return (self.prompt * options.price[0] + self.completion * options.price[1]) / 1e6

    def cap_reached(self, options: DistillOptions) -> str | None:
        """Which cap the spending has reached (a sentence), None while under both."""
        tokens, cost = self.prompt + self.completion, self.cost(options)
        if options.max_tokens is not None and tokens >= options.max_tokens:
            return f"the teacher's token cap ({options.max_tokens}) is reached ({tokens} tokens)"
        if options.max_cost is not None and cost is not None and cost >= options.max_cost:
            return f"the teacher's cost cap (${options.max_cost:g}) is reached (${cost:.4f})"
        return None


def teacher_overrides(options: DistillOptions) -> list[str]:
    """The overrides that make the experiment's model the teacher endpoint."""
    url = options.teacher_url.rstrip("/")
    out = ["model=openai-compatible", f"model.base_url={url if url.endswith('/v1') else url + '/v1'}",
           f"model.model={options.teacher_model}", f"model.request_token_ids={str(options.token_ids).lower()}",
           f"rollout.samples_per_task={options.trials}"]
    if options.key_env:
        out.append(f"model.api_key_env={options.key_env}")
    return out


def check_split(split: str) -> None:
    if split.lower() in EVAL_SPLITS:
        raise UserError(f"env.split={split}: forge distill runs training tasks only (trajectories of evaluation "
                        "tasks in the training data make every later figure on them worthless)",
                        fix="env.split=train (the default), or the env's own training split", exit_code=2)


def run_distill(exp: Experiment, data: dict[str, Any], student_dir: Path, options: DistillOptions,
                quiet: bool = False, on_run_dir: Callable[[Path], None] | None = None) -> dict[str, Any]:
    """Run the train tasks through the harness against the teacher; export the kept rollouts as SFT samples."""
    from forge_cli.envs.source import load_tasks
    from forge_cli.rollout.progress import RunProgress
    from forge_cli.rollout.scheduler import summarise
    from forge_cli.rollout.session import RolloutSession
    from forge_cli.train.sft import export_sft

    taskset = load_tasks(exp.env, exp.rollout.max_tasks, purpose="rollout")
    check_split(taskset.split or "")
    progress = RunProgress(len(taskset.tasks) * options.trials, quiet=quiet)
    started = time.monotonic()
    session = RolloutSession(exp, data, taskset, progress.say)
    if on_run_dir is not None:
        on_run_dir(session.run_dir)
    results: list[Any] = []
    spent = Spending()
    capped: str | None = None
    with progress, session:
        jobs = session.jobs(taskset.tasks, options.trials)
        progress.say(f"distill: {len(jobs)} rollouts ({len(taskset.tasks)} {taskset.split} tasks x {options.trials}) "
                     f"against the teacher {options.teacher_model} at {options.teacher_url}; kept: reward >= "
                     f"{options.min_reward:g}" + (f"; token cap {options.max_tokens}" if options.max_tokens else "")
                     + (f"; cost cap ${options.max_cost:g}" if options.max_cost is not None else ""))
        size = max(1, exp.rollout.concurrency)
        for first in range(0, len(jobs), size):
            capped = spent.cap_reached(options)
            if capped:
                progress.say(f"distill: {capped}; {len(jobs) - first} rollouts not started")
                break
            batch = session.run(jobs[first:first + size], on_start=progress.started, on_result=progress.finished)
            for attempt in range(1, options.retries + 1):
                failed = [r for r in batch if r.status == "infra_error"]
                results += [r for r in batch if r.status != "infra_error"]
                spent.add(batch)
                if not failed:
                    batch = []
                    break
                progress.say(f"distill: {len(failed)} rollout(s) failed on the endpoint's side; again in "
                             f"{2 ** attempt} s (attempt {attempt + 1} of {options.retries + 1})")
                time.sleep(2 ** attempt)
                by_task = {t.id: t for t in taskset.tasks}
                batch = session.run([session.job(by_task[r.task_id], r.sample, attempt=attempt) for r in failed],
                                    on_start=progress.started, on_result=progress.finished)
            if batch:  # the last attempt's results, failed or not
                results += batch
                spent.add(batch)
    out = Path(options.out).expanduser().resolve() if options.out else session.run_dir / "sft.parquet"
    exported = export_sft(session.run_dir, out, student_dir, options.min_reward)
    summary = {"run_id": session.run_id, "run_dir": str(session.run_dir), "harness": exp.harness.name,
               "env": exp.env.name, "split": taskset.split, "teacher": options.teacher_model,
               "teacher_tokens": spent.prompt + spent.completion, "teacher_prompt_tokens": spent.prompt,
               "teacher_completion_tokens": spent.completion, "teacher_cost_usd": spent.cost(options),
               "token_cap_reached": bool(capped and "token cap" in capped),
               "cost_cap_reached": bool(capped and "cost cap" in capped), **summarise(results),
               "kept": exported["kept"], "sft": exported, "duration_s": round(time.monotonic() - started, 1),
               "options": {k: v for k, v in asdict(options).items()}}
    (session.run_dir / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
    return summary
