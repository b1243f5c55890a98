"""``env=claweval``: Claw-Eval tasks run through any harness and graded by the checkout's own graders.

``env.path`` is a Claw-Eval checkout (github.com/claw-eval/claw-eval; forge ships none of it): ``tasks/<ID>/``
(``task.yaml``, ``grader.py``, ``fixtures/``), ``mock_services/`` and ``src/claw_eval``. Splits by id prefix:
``general`` (T), ``multimodal`` (M), ``multi_turn`` (C: its simulated user is not run by forge, so the split is
listed as unsupported). Tasks forge cannot run faithfully are listed with the reason and left out: the live web
(``web_real`` services), files the checkout lacks (media kept on a model hub or in LFS), prompt attachments (image
/ video input), Claw-Eval's sandbox container (env snapshots, grader files injected into it), and, without a judge
(``eval.judge.base_url``), tasks whose grader asks an LLM judge (not gradable: never scored as failures).

Per trial (``prepare``): the task's mock services on the rollout's own ports (``mock.py``), ``sandbox_files`` in
the workspace, the task's tools over forge's tool server forwarding to the service endpoints (each call recorded
as Claw-Eval's ``ToolDispatch``). After the harness (``ClawEvalVerifier``): the rollout's Claw-Eval trace
(``trace.py``) in ``rollouts/<id>/claweval/<task>_<8 hex>.jsonl``, graded by the checkout's grader and scoring in
a child process in forge's Claw-Eval environment (``worker.py``): ``$FORGE_HOME/envs/claweval-<key>``, a venv with
``pip install <checkout>[mock]``, made once (``env.options.python`` names an interpreter to use instead). Reward:
Claw-Eval's task score; passed: its ``is_pass`` (score >= 0.75). ``forge eval`` adds Claw-Eval's headline
(``report.py``).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import yaml
from pydantic import BaseModel, ConfigDict

from forge_cli.config.schema import JudgeOverrides, judge_settings
from forge_cli.envs.claweval.mock import MockServiceError, Router, start_services
from forge_cli.envs.claweval.report import summarize
from forge_cli.envs.claweval.trace import build_trace, write_trace
from forge_cli.envs.claweval.worker import MARKER
from forge_cli.envs.source import Log, Purpose, SetupError, TaskSource
from forge_cli.envs.task import Task
from forge_cli.envs.verifier import Score, Verifier, VerifierError, VerifyContext
from forge_cli.errors import UserError
from forge_cli.paths import forge_home
from forge_cli.tools.spec import HttpBackendSpec, ToolSpec

if TYPE_CHECKING:
    from forge_cli.runtime.base import Sandbox

WORKER = Path(__file__).with_name("worker.py")
SPLITS = {"T": "general", "M": "multimodal", "C": "multi_turn"}
NEEDED = ("tasks", "mock_services", "src/claw_eval/graders/registry.py", "src/claw_eval/models/scoring.py")
FIX = ("give a Claw-Eval checkout: git clone https://github.com/claw-eval/claw-eval and pass "
       "env.path=/path/to/claw-eval")
MULTI_TURN = "multi_turn tasks need Claw-Eval's simulated user (runner/user_agent.py), which forge does not run"


class ClawEvalOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # the LLM judge (eval.judge, overridden key by key here)
    judge: JudgeOverrides = {}
    # interpreter that grades and runs the mock services (null: forge's managed venv with the checkout installed)
    python: str | None = None


def check_checkout(path: str | None) -> Path:
    """The checkout at ``path``; UserError (exit 2) when it is not configured or not a Claw-Eval checkout."""
    if not path:
        raise UserError("env 'claweval' needs env.path: a Claw-Eval checkout", fix=FIX, exit_code=2)
    root = Path(path).expanduser().resolve()
    if not root.is_dir():
        raise UserError(f"env.path: {root} does not exist or is not a directory", fix=FIX, exit_code=2)
    missing = [p for p in NEEDED if not (root / p).exists()]
    if missing:
        raise UserError(f"env.path: {root} is not a Claw-Eval checkout (missing {', '.join(missing)})", fix=FIX,
                        exit_code=2)
    return root


def grader_needs_judge(task_dir: Path, seen: frozenset[Path] = frozenset()) -> bool:
    """Whether the task's grader (or a peer grader it loads) uses the judge beyond accepting the parameter."""
    import re

    path = task_dir / "grader.py"
    if not path.exists() or path in seen:
        return False
    text = path.read_text(encoding="utf-8", errors="replace")
    body = re.sub(r"judge\s*(:\s*[A-Za-z_\[\]| .]*)?=\s*None", "", text)
    if re.search(r"\bjudge\b", body) or "llm_judge" in text or "pinbench_common" in text:
        return True
    return any(grader_needs_judge(task_dir.parent / m, seen | {path})
               for m in re.findall(r"load_peer_grader\(\s*[\"']([^\"']+)", text))


def why_unsupported(task: dict[str, Any], task_dir: Path, judge: bool) -> str | None:
    """Why forge leaves this task out (None: it runs)."""
    if str(task.get("task_id", ""))[:1] == "C" or (task.get("user_agent") or {}).get("enabled"):
        return MULTI_TURN
    services = [str(s.get("name")) for s in task.get("services") or []]
    if any(s.startswith("web_real") for s in services):
        return "needs the live web (web_real service)"
    missing = [f for f in [*(task.get("sandbox_files") or []), *((task.get("prompt") or {}).get("attachments") or [])]
               if not (task_dir / f).exists()]
    if missing:
        return f"media not in the checkout (model hub / LFS): {', '.join(missing[:3])}"
    if (task.get("prompt") or {}).get("attachments"):
        return "prompt attachments (image/audio/video input) are not passed to harnesses"
    if task.get("env_snapshot_files") or task.get("env_snapshot_commands") or task.get("sandbox_grader_files"):
        return "needs Claw-Eval's sandbox container (env snapshot / grader files injected into it)"
    if not judge and grader_needs_judge(task_dir):
        return "not gradable: its grader needs an LLM judge and none is configured (eval.judge.base_url)"
    return None


def managed_python(checkout: Path, log: Log | None = None) -> str:
    """forge's Claw-Eval environment for ``checkout`` (made once): a venv with ``pip install <checkout>[mock]``."""

    key = hashlib.sha256(str(checkout).encode() + (checkout / "pyproject.toml").read_bytes()).hexdigest()[:12]
    venv = forge_home() / "envs" / f"claweval-{key}"
    python = venv / "bin" / "python"
    ready = venv / ".forge-ready"
    if ready.exists():
        return str(python)
    venv.parent.mkdir(parents=True, exist_ok=True)
    with (venv.parent / f"claweval-{key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready.exists():
            return str(python)
        if log:
            log(f"claweval: installing {checkout}[mock] into {venv} (once)")
        for argv in ([sys.executable, "-m", "venv", "--clear", str(venv)],
                     [str(python), "-m", "pip", "install", "-q", f"{checkout}[mock]"]):
            done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
            if done.returncode != 0:
                raise UserError(f"claweval: `{' '.join(argv[:4])} ...` failed: {done.stderr[-1500:]}",
                                fix="check the checkout's pyproject.toml and that pip can reach its index",
                                exit_code=1)
        ready.write_text(str(checkout) + "\n")
    return str(python)


class ClawEvalSource(TaskSource, name="claweval"):
    """Claw-Eval's tasks from the checkout at ``env.path`` (see the module docstring)."""

    Options = ClawEvalOptions

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        # task id -> why forge leaves it out (filled by load)
        self.left_out: dict[str, str] = {}
        self.tasks_by_id: dict[str, dict[str, Any]] = {}
        self._python: str | None = self.options.python

    def splits(self) -> list[str]:
        return list(SPLITS.values())

    def default_split(self, purpose: Purpose) -> str | None:
        return "general"

    def python(self, log: Log | None = None) -> str:
        if self._python is None:
            self._python = managed_python(check_checkout(self.env.path), log)
        return self._python

    def load(self, split: str | None) -> list[Task]:
        root = check_checkout(self.env.path)
        if split == "multi_turn":
            raise UserError(f"env.split: multi_turn is not supported: {MULTI_TURN}",
                            fix="use env.split=general or multimodal", exit_code=2)
        judge = judge_settings(self.options.judge).resolved("CLAWEVAL_JUDGE_BASE_URL", "CLAWEVAL_JUDGE_MODEL")
        router = Router.get()
        atexit.register(router.stop_all)
        tasks, self.left_out = [], {}
        for yml in sorted((root / "tasks").glob("*/task.yaml")):
            try:
                raw = yaml.safe_load(yml.read_text(encoding="utf-8"))
            except yaml.YAMLError as exc:
                raise UserError(f"env.path: {yml} does not parse: {exc}", exit_code=2) from None
            task_id = str(raw.get("task_id") or yml.parent.name)
            if split is not None and SPLITS.get(task_id[:1]) != split:
                continue
            why = why_unsupported(raw, yml.parent, judge["base_url"] is not None)
            if why is not None:
                self.left_out[task_id] = why
                continue
            self.tasks_by_id[task_id] = raw
            tasks.append(self._task(raw, yml.parent, router, judge))
        wanted = [i for i in self.env.task_ids or [] if i in self.left_out]
        if wanted:
            raise UserError("env.task_ids: " + "; ".join(f"{i}: {self.left_out[i]}" for i in wanted), exit_code=2)
        return tasks

    def _task(self, raw: dict[str, Any], task_dir: Path, router: Router, judge: dict[str, Any]) -> Task:
        tools = []
        for spec in raw.get("tools") or []:
            schema = dict(spec.get("input_schema") or {})
            schema.setdefault("type", "object")
            schema.setdefault("properties", {})
            tools.append(ToolSpec(name=spec["name"], description=str(spec.get("description") or ""),
                                  input_schema=schema,
                                  backend=HttpBackendSpec(kind="http", url=router.tool_url(spec["name"]))))
        files: dict[str, str | bytes] = {f: (task_dir / f).read_bytes() for f in raw.get("sandbox_files") or []}
        env = raw.get("environment") or {}
        needs_judge = grader_needs_judge(task_dir)
        verifier = ClawEvalVerifier(source=self, task_dir=str(task_dir), needs_judge=needs_judge,
                                    judge=judge if needs_judge else {})
        return Task(id=str(raw["task_id"]), instruction=str((raw.get("prompt") or {}).get("text") or ""),
                    files=files, verifier=verifier, category=str(raw.get("category") or ""), tools=tuple(tools),
                    timeout_s=int(env.get("timeout_seconds") or 0) or None,
                    metadata={"claweval": {"split": SPLITS.get(str(raw["task_id"])[:1], "general"),
                                           "task_dir": str(task_dir), "needs_judge": needs_judge}})

    def build(self, tasks: list[Task], runtime_kind: str, log: Log) -> None:
        self.python(log)

    async def prepare(self, sandbox: Sandbox, task: Task) -> None:
        await super().prepare(sandbox, task)
        root = check_checkout(self.env.path)
        raw = self.tasks_by_id[task.id]
        log_dir = (sandbox.log_dir or Path("/tmp")) / "services"
        python = await asyncio.to_thread(self.python)
        try:
            mocks = await asyncio.to_thread(start_services, sandbox.spec.rollout_id, raw, root, python, log_dir)
        except MockServiceError as exc:
            raise SetupError(str(exc)) from None
        Router.get().add(mocks)

    def benchmark_summary(self, trials: list[dict[str, Any]], run_dir: Path, runs_per_task: int) -> dict[str, Any]:
        """Claw-Eval's headline over the eval's trials, and its traces in a directory score_summary.py reads."""
        return summarize(trials, run_dir, runs_per_task, splits=SPLITS, left_out=self.left_out)


class ClawEvalVerifier(Verifier, kind="claweval"):
    """Writes the rollout's Claw-Eval trace and grades it with the checkout's grader (``worker.py``)."""

    def __init__(self, source: ClawEvalSource, task_dir: str, needs_judge: bool = False,
                 judge: dict[str, Any] | None = None) -> None:
        self.source, self.task_dir, self.needs_judge = source, task_dir, needs_judge
        self.judge = dict(judge or {})

    def describe(self) -> str:
        return (f"claweval: {Path(self.task_dir).name}/grader.py + models/scoring.py"
                + (f"; judge {self.judge.get('base_url')}" if self.needs_judge else ""))

    def _judge_down(self) -> str | None:
        url = self.judge.get("base_url")
        if not url:
            return "no judge endpoint is configured (eval.judge.base_url)"
        try:
            httpx.get(str(url).rstrip("/") + "/models", timeout=float(self.judge.get("probe_timeout_s") or 5),
                      headers={"Authorization": f"Bearer {self.judge.get('api_key') or 'EMPTY'}"})
        except httpx.HTTPError as exc:
            return f"judge {url} unreachable: {type(exc).__name__}: {exc}"
        return None

    async def score(self, ctx: VerifyContext) -> Score:
        router = Router.get()
        mocks = router.rollouts.get(ctx.rollout_id)
        if mocks is None:
            raise VerifierError(f"no Claw-Eval services were started for rollout {ctx.rollout_id}")
        try:
            audit = await asyncio.to_thread(mocks.audit)
        finally:
            await asyncio.to_thread(router.remove, ctx.rollout_id)
        records = await asyncio.to_thread(ctx.records)
        model = next((str(r.get("model")) for r in records if r.get("model")), "unknown")
        events = build_trace(mocks.task, model, records, mocks.dispatches, audit,
                             time.time() - mocks.started)
        out = (ctx.log_path.parent if ctx.log_path is not None else Path(ctx.reward_dir)) / "claweval"
        trace = out / f"{ctx.task.id}_{events[0]['trace_id'].replace('-', '')[:8]}.jsonl"
        await asyncio.to_thread(write_trace, trace, events)
        ctx.log(f"trace: {trace} ({len(mocks.dispatches)} dispatch(es), {len(records)} model call(s))")
        if self.needs_judge:
            down = await asyncio.to_thread(self._judge_down)
            if down:
                ctx.log(f"not judged: {down}")
                return Score(reward=0.0, passed=False, details={"not_judged": down, "trace": str(trace)})
        python = await asyncio.to_thread(self.source.python)
        root = check_checkout(self.source.env.path)
        env = {**os.environ, "FORGE_CLAWEVAL_JUDGE": json.dumps(self.judge), "PYTHONPATH": str(root / "src")}
        try:
            done = await asyncio.to_thread(
                subprocess.run, [python, str(WORKER), "grade", str(root), self.task_dir, str(trace)],
                capture_output=True, text=True, timeout=ctx.timeout_s, cwd=root, env=env, check=False)
        except subprocess.TimeoutExpired:
            raise VerifierError(f"Claw-Eval's grader ran past {ctx.timeout_s}s") from None
        if done.returncode != 0:
            ctx.log(f"Claw-Eval grader failed (exit {done.returncode}):\n{done.stderr}")
            tail = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"
            raise VerifierError(f"Claw-Eval's grader raised: {tail}")
        _, sep, tail = done.stdout.rpartition(MARKER)
        if not sep:
            raise VerifierError("Claw-Eval's grader printed no result")
        result = json.loads(tail)
        ctx.log(f"claw-eval: {result}")
        with contextlib.suppress(Exception):
            (out / "grading.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
        return Score(reward=float(result["task_score"]), passed=bool(result["passed"]),
                     subscores={k: float(v) for k, v in result["scores"].items()},
                     details={"trace": str(trace), "task_score": result["task_score"],
                              "split": SPLITS.get(ctx.task.id[:1], "general")})
