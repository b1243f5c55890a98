"""``env=qwenclawbench``: QwenClawBench tasks run through any harness and graded by the checkout's own grader.

``env.path`` is a QwenClawBench checkout (github.com/SKYLENAGE-AI/QwenClawBench; forge ships none of it). Tasks are
``data/<dataset>/tasks/task_*.md`` as the checkout's ``scripts/lib_tasks.py`` parses them (in a child process). The
workspace starts as its Docker runner makes it: each ``workspace_files`` entry, inline ``content`` at ``path``, else
``assets/<task_id>/<source>`` (then ``assets/<source>``) copied to ``dest``; a missing asset fails the task's
setup (an infra error, as it fails theirs). The harness gets the task's Prompt section.

After the harness exits, :class:`QwenClawBenchVerifier` snapshots the workspace, builds the transcript (OpenClaw's
own session when the sandbox holds one: ``native.py``; else the proxy's records converted: ``transcript.py``) and
grades it in a child process with the checkout's ``lib_grading`` (``worker.py``: the judge only through the
configured endpoint, bounded retries). The reward is their score; ``passed`` is their pass rule, score 1.0. A trial the
judge was needed for but could not score is *not judged* (reward and passed None, the reason in ``error``):
never a failure. ``rollouts/<id>/qwenclawbench/`` keeps ``transcript.jsonl`` / ``transcript.json``,
``grading.json`` and ``workspace/``; ``forge eval`` adds QwenClawBench's headline (``benchmark_summary``) and a
batch directory in their runner's layout, ``<run>/qwenclawbench/``.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from forge_cli.config.schema import JudgeOverrides, judge_settings
from forge_cli.envs.qwenclawbench.native import native_transcript
from forge_cli.envs.qwenclawbench.report import summarize
from forge_cli.envs.qwenclawbench.transcript import from_records, to_jsonl
from forge_cli.envs.source import TaskSource
from forge_cli.envs.task import Task
from forge_cli.envs.verifier import Score, Verifier, VerifierError, VerifyContext
from forge_cli.errors import UserError

WORKER = Path(__file__).with_name("worker.py")
MARKER = "@@QCB-RESULT@@"
DATASET = "qwenclawbench-v1.1-100"
NEEDED = ("scripts/lib_tasks.py", "scripts/lib_grading.py")


class QwenClawBenchOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # the dataset directory under data/
    dataset: str = DATASET
    # the LLM judge (eval.judge, overridden key by key here)
    judge: JudgeOverrides = {}


def _worker_result(stdout: str) -> Any:
    _, sep, tail = stdout.rpartition(MARKER)
    if not sep:
        raise ValueError("no result")
    return json.loads(tail)


def check_checkout(path: str | None, dataset: str) -> Path:
    """The checkout at ``path``; UserError (exit 2) when it is not configured or not a QwenClawBench checkout."""
    fix = ("give a QwenClawBench checkout: git clone https://github.com/SKYLENAGE-AI/QwenClawBench and pass "
           "env.path=/path/to/QwenClawBench")
    if not path:
        raise UserError("env 'qwenclawbench' needs env.path: a QwenClawBench checkout", fix=fix, exit_code=2)
    root = Path(path).expanduser().absolute()
    if not root.is_dir():
        raise UserError(f"env.path: {root} does not exist or is not a directory", fix=fix, exit_code=2)
    missing = [p for p in (*NEEDED, f"data/{dataset}/tasks") if not (root / p).exists()]
    if missing:
        raise UserError(f"env.path: {root} is not a QwenClawBench checkout (missing {', '.join(missing)})",
                        fix=fix, exit_code=2)
    return root


class QwenClawBenchSource(TaskSource, name="qwenclawbench"):
    """QwenClawBench's tasks from the checkout at ``env.path`` (see the module docstring)."""

    Options = QwenClawBenchOptions

    def load(self, split: str | None) -> list[Task]:
        root = check_checkout(self.env.path, self.options.dataset)
        data = root / "data" / self.options.dataset
        why = "no output"
        try:
            run = subprocess.run([sys.executable, str(WORKER), "load", str(root), self.options.dataset],
                                 capture_output=True, text=True, timeout=300, cwd=root)
            if run.stderr.strip():
                why = run.stderr.strip().splitlines()[-1]
            parsed = _worker_result(run.stdout) if run.returncode == 0 else None
        except (subprocess.TimeoutExpired, ValueError) as exc:
            parsed, why = None, str(exc)
        if not isinstance(parsed, list):
            raise UserError(f"env.path: {root}: the checkout's scripts/lib_tasks.py could not load the tasks ({why})",
                            fix="check the checkout (and that PyYAML is installed for its loader)", exit_code=2)
        bad = [f"{t['file']}: {t['error']}" for t in parsed if "error" in t]
        if bad:
            raise UserError(f"env.path: {len(bad)} task file(s) do not parse: {'; '.join(bad[:3])}", exit_code=2)
        judge = judge_settings(self.options.judge).resolved("JUDGE_BASE_URL", "JUDGE_MODEL")
        return [self._task(t, data, judge) for t in parsed]

    def _task(self, t: dict[str, Any], data: Path, judge: dict[str, Any]) -> Task:
        files: dict[str, str | bytes] = {}
        setup: list[str] = []
        for spec in t.get("workspace_files") or []:
            if "content" in spec:
                files[str(spec["path"])] = str(spec["content"])
                continue
            found = next((c for c in (data / "assets" / t["task_id"] / spec["source"], data / "assets" / spec["source"])
                          if c.is_file()), None)
            if found is None:
                setup.append(f"echo 'QwenClawBench asset {spec['source']} not found under {data / 'assets'}' >&2; "
                             "exit 1")
            else:
                files[str(spec["dest"])] = found.read_bytes()
        verifier = QwenClawBenchVerifier(checkout=str(data.parent.parent), tasks_dir=str(data / "tasks"),
                                         task_file=t["file"], grading_type=t["grading_type"], judge=judge)
        return Task(id=t["task_id"], instruction=t["prompt"], files=files, setup=setup, verifier=verifier,
                    category=t.get("category") or "", timeout_s=int(t.get("timeout_seconds") or 0) or None,
                    metadata={"qwenclawbench": {"file": t["file"], "grading_type": t["grading_type"],
                                                "grading_weights": t.get("grading_weights")}})

    def benchmark_summary(self, trials: list[dict[str, Any]], run_dir: Path, runs_per_task: int) -> dict[str, Any]:
        """QwenClawBench's headline over the eval's trials, and a batch directory in its runner's layout."""
        return summarize(trials, run_dir, runs_per_task, dataset=self.options.dataset,
                         passk=lambda grades: self._passk(grades, runs_per_task))

    def _passk(self, grades_by_task: dict[str, Any], runs_per_task: int) -> dict[str, Any]:
        """QwenClawBench's own pass@k over the graded tasks, computed by its code in the checkout (the worker)."""
        root = check_checkout(self.env.path, self.options.dataset)
        run = subprocess.run([sys.executable, str(WORKER), "passk"], cwd=root, capture_output=True, text=True,
                             input=json.dumps({"checkout": str(root), "grades_by_task": grades_by_task,
                                               "runs_per_task": runs_per_task}), timeout=120)
        return _worker_result(run.stdout) if run.returncode == 0 else {"error": run.stderr[-500:]}


class QwenClawBenchVerifier(Verifier, kind="qwenclawbench"):
    """Grades one trial with the checkout's ``lib_grading`` in a child process."""

    def __init__(self, checkout: str, tasks_dir: str, task_file: str, grading_type: str = "automated",
                 judge: dict[str, Any] | None = None) -> None:
        self.checkout, self.tasks_dir, self.task_file = checkout, tasks_dir, task_file
        self.grading_type = grading_type
        self.judge = dict(judge or {})

    def describe(self) -> str:
        judge = self.judge.get("base_url") or "none configured"
        return (f"qwenclawbench: lib_grading ({self.grading_type}) on {self.task_file}"
                + (f"; judge {judge}" if self.grading_type != "automated" else ""))

    async def _transcript(self, ctx: VerifyContext) -> tuple[list[dict[str, Any]], str]:
        native = await native_transcript(ctx)
        if native is not None:
            return native
        records = await asyncio.to_thread(ctx.records)
        return from_records(records, ctx.rollout_id, ctx.sandbox.workdir), f"converted from {len(records)} call(s)"

    async def _workspace(self, ctx: VerifyContext, dest: Path) -> None:
        archive = f"{ctx.reward_dir}/workspace.tgz"
        packed = await ctx.run(f"tar -czf {archive} .")
        if not packed.ok:
            raise VerifierError(f"cannot snapshot the workspace: {packed.stderr[-300:]}")
        data = await ctx.sandbox.read_file(archive)
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            tar.extractall(dest, filter="data")

    async def score(self, ctx: VerifyContext) -> Score:
        keep = ctx.log_path.parent / "qwenclawbench" if ctx.log_path is not None else None
        with tempfile.TemporaryDirectory(prefix="forge-qcb-") as tmp:
            out = keep or Path(tmp)
            out.mkdir(parents=True, exist_ok=True)
            transcript, origin = await self._transcript(ctx)
            (out / "transcript.jsonl").write_text(to_jsonl(transcript), encoding="utf-8")
            (out / "transcript.json").write_text(json.dumps(transcript, indent=2, ensure_ascii=False), "utf-8")
            await self._workspace(ctx, out / "workspace")
            request = {"checkout": self.checkout, "tasks_dir": self.tasks_dir,
                       "task_file": str(Path(self.tasks_dir) / self.task_file),
                       "transcript": str(out / "transcript.json"), "workspace": str(out / "workspace"),
                       "status": "success" if ctx.harness_status == "ok" else ctx.harness_status,
                       "judge": self.judge}
            ctx.log(f"transcript: {origin}, {len(transcript)} entries; grading in a child process")
            result = await self._grade(ctx, request, cwd=Path(tmp))
        grade = result.get("grade")
        details: dict[str, Any] = {"transcript": origin, "grading_type": result.get("grading_type"),
                                   "judged": result.get("judged", False),
                                   **({"dir": str(keep)} if keep else {})}
        if "judge_not_needed" in result:
            details["judge_not_needed"] = result["judge_not_needed"]
        if grade is None:
            auto = result.get("automated") or {}
            details["not_judged"] = result.get("not_judged", "not judged")
            details["automated"] = auto
            if keep:
                (keep / "grading.json").write_text(json.dumps({"not_judged": details["not_judged"],
                                                               "automated": auto}, indent=2), "utf-8")
            return Score(reward=0.0, passed=False, subscores=_floats(auto.get("breakdown")), details=details)
        if keep:
            (keep / "grading.json").write_text(json.dumps(grade, indent=2, ensure_ascii=False), "utf-8")
        raw = float(grade.get("score") or 0.0)
        details.update(score=raw, score_simple=grade.get("score_simple"), notes=grade.get("notes", ""))
        return Score(reward=min(max(raw, 0.0), 1.0), passed=raw >= 1.0 - 1e-9,
                     subscores=_floats(grade.get("breakdown")), details=details)

    async def _grade(self, ctx: VerifyContext, request: dict[str, Any], cwd: Path) -> dict[str, Any]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("JUDGE_")}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(WORKER), "grade", cwd=cwd, env=env, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True)
        try:
            stdout, stderr = await proc.communicate(json.dumps(request).encode())
        except asyncio.CancelledError:  # the verifier's time limit: the grader and what it started go
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            raise
        text = stderr.decode("utf-8", "replace")
        ctx.log(f"--- grader stderr\n{text[-8000:]}")
        if proc.returncode != 0:
            last = text.strip().splitlines()[-1] if text.strip() else f"exit {proc.returncode}"
            raise VerifierError(f"QwenClawBench's grader raised: {last[:300]}", log=text)
        try:
            result = _worker_result(stdout.decode("utf-8", "replace"))
        except ValueError as exc:
            raise VerifierError(f"QwenClawBench's grader gave no result ({exc})", log=text) from None
        if not isinstance(result, dict):
            raise VerifierError("QwenClawBench's grader gave no result")
        return result


def _floats(values: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in (values or {}).items():
        if isinstance(v, int | float):
            out[str(k)] = float(v)
    return out
