"""Start-URL web tasks judged over screenshots: what ``env=webvoyager`` and ``env=mind2web`` share.

A task is a question and a start URL. A rollout gets its own headless Chromium at that URL (after ``url_map``) and
the browser tools (forge_cli/browser/); forge keeps a screenshot after each of the agent's actions and one at the
end. After the harness exited, the :class:`WebJudgeVerifier` asks the judge (``eval.judge``: any OpenAI-compatible
multimodal endpoint) following the benchmark's protocol (forge_cli/envs/web/judge.py) over those screenshots, the
agent's final answer (the tail of the harness's output) and its actions; every input and answer of the judge is kept
in the rollout's ``judge/``. A judge that is not configured or gives no usable answer leaves the trial **not
judged** (reward and passed None), never failed.

``env.options.url_map`` rewrites task hosts to other sites ({"www.allrecipes.com": "http://127.0.0.1:8001"}), for
offline copies of the sites; without the live web and without a mapping a task's page does not load (its rollout is
an infra error: the browser could not open the start page).
"""

from __future__ import annotations

import abc
import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field

from forge_cli.browser.prerequisites import check_browser_runtime, ensure_browser
from forge_cli.browser.tools import BROWSER_TOOLS
from forge_cli.config.schema import JudgeOverrides, judge_settings
from forge_cli.envs.source import Log, TaskSource
from forge_cli.envs.task import Task
from forge_cli.envs.verifier import Score, Verifier, VerifierError, VerifyContext
from forge_cli.envs.web import judge as protocol
from forge_cli.errors import UserError

Protocol = Literal["webvoyager", "webjudge"]
INSTRUCTION = ("{question}\n\nThe browser is open at {url}. Use your browser tools to do this on the web site (a "
               "snapshot lists the page's elements). When you are done, reply with your final answer: the information "
               "asked for, or what you did.")


class WebOptions(BaseModel):
    """``env.options`` of the judged web envs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # the multimodal judge (eval.judge, overridden key by key here)
    judge: JudgeOverrides = {}
    # task host (or scheme://host) -> base URL it is served from instead, e.g. an offline copy
    url_map: dict[str, str] | None = None
    # screenshots the WebVoyager judge sees (the last k)
    judge_screenshots: int = Field(default=3, ge=1, le=protocol.WEBJUDGE_MAX_IMAGES)


@dataclass(frozen=True)
class WebTask:
    """One task as a benchmark file gives it."""

    id: str
    question: str
    url: str
    site: str = ""


def map_url(url: str, url_map: dict[str, str]) -> str:
    """``url`` with its scheme and host replaced by ``url_map``'s base URL for that host (path and query kept)."""
    parts = urlsplit(url)
    base = url_map.get(f"{parts.scheme}://{parts.netloc}") or url_map.get(parts.netloc)
    if base is None:
        return url
    mapped = urlsplit(base)
    path = mapped.path.rstrip("/") + (parts.path or "/")
    return urlunsplit((mapped.scheme, mapped.netloc, path, parts.query, parts.fragment))


class WebTaskSource(TaskSource):
    """A benchmark's task file (``env.path``) read by :meth:`read`; judged by :attr:`protocol`."""

    Options: ClassVar[type[BaseModel]] = WebOptions
    # forge doctor checks Chromium and @playwright/mcp for it
    needs_browser: ClassVar[bool] = True
    protocol: ClassVar[Protocol]
    example: ClassVar[str]

    @abc.abstractmethod
    def read(self, path: Path) -> list[WebTask]:
        """The file's tasks; ValueError naming the line or entry that does not parse."""

    def load(self, split: str | None) -> list[Task]:
        if not self.env.path:
            raise UserError(f"env '{self.env.name}' needs its task file (never shipped with forge)",
                            fix=f"set env.path={self.example}", exit_code=2)
        path = Path(self.env.path).expanduser()
        if not path.is_file():
            raise UserError(f"env.path: {path} is not a file", fix=f"set env.path={self.example}", exit_code=2)
        try:
            found = self.read(path)
        except (ValueError, KeyError, TypeError) as exc:
            raise UserError(f"{path}: not a {self.env.name} task file ({exc})",
                            fix=f"give the benchmark's own file, e.g. {self.example}", exit_code=2) from None
        judge = judge_settings(self.options.judge).resolved("JUDGE_BASE_URL", "JUDGE_MODEL")
        return [self._task(t, judge) for t in found]

    def _task(self, task: WebTask, judge: dict[str, Any]) -> Task:
        url = map_url(task.url, self.options.url_map or {})
        verifier = WebJudgeVerifier(protocol=self.protocol, question=task.question, judge=judge,
                                    screenshots=self.options.judge_screenshots)
        return Task(id=task.id, instruction=INSTRUCTION.format(question=task.question, url=url), verifier=verifier,
                    category=task.site or self.env.name, tools=BROWSER_TOOLS,
                    tool_state={"browser": {"url": url, "screenshots": True}},
                    metadata={"url": url, "task_url": task.url, "site": task.site})

    def check_runtime(self, runtime_kind: str) -> None:
        check_browser_runtime(self.env.name, runtime_kind)

    def build(self, tasks: list[Task], runtime_kind: str, log: Log) -> None:
        ensure_browser(self.env.name, runtime_kind, log)


class WebJudgeVerifier(Verifier, kind="webjudge"):
    """The benchmark's judge over the rollout's screenshots, answer and actions (forge_cli/envs/web/judge.py)."""

    def __init__(self, protocol: Protocol, question: str, judge: dict[str, Any] | None = None,
                 screenshots: int = 3) -> None:
        self.protocol, self.question, self.screenshots = protocol, question, screenshots
        self.judge = dict(judge or {})

    def describe(self) -> str:
        return f"webjudge: {self.protocol} judge {self.judge.get('model') or '(none)'} at " \
               f"{self.judge.get('base_url') or '(not configured)'}"

    async def score(self, ctx: VerifyContext) -> Score:
        page = ((ctx.tool_state or {}).get("services") or {}).get("browser")
        if not isinstance(page, dict):
            raise VerifierError("the rollout's browser could not be read (no screenshots to judge)")
        shots = [str(p) for p in page.get("screenshots") or []]
        actions = [f"{c['tool']}({json.dumps(c['arguments'], ensure_ascii=False)})"
                   for c in (ctx.tool_state or {}).get("calls") or []]
        answer = ctx.final_output.strip()
        out = (ctx.log_path.parent if ctx.log_path is not None else Path(ctx.reward_dir)) / "judge"
        out.mkdir(parents=True, exist_ok=True)
        inputs = {"protocol": self.protocol, "task": self.question, "answer": answer, "actions": actions,
                  "screenshots": shots, "final_url": page.get("url")}
        (out / "inputs.json").write_text(json.dumps(inputs, indent=2, ensure_ascii=False))
        try:
            client = protocol.JudgeClient.from_settings(self.judge)
            verdict, answers = await asyncio.to_thread(self._judge, client, answer, shots, actions)
        except protocol.JudgeDown as exc:
            ctx.log(f"not judged: {exc}")
            return Score(reward=0.0, passed=False, details={"not_judged": str(exc), "judge_dir": str(out)})
        (out / "answers.json").write_text(json.dumps(answers, indent=2, ensure_ascii=False))
        ctx.log(f"{self.protocol} judge: {'success' if verdict else 'failure'} ({len(shots)} screenshot(s))")
        return Score(reward=1.0 if verdict else 0.0, passed=verdict,
                     details={"judge": self.protocol, "screenshots": len(shots), "judge_dir": str(out)})

    def _judge(self, client: protocol.JudgeClient, answer: str, shots: list[str],
               actions: list[str]) -> tuple[bool, dict[str, Any]]:
        if self.protocol == "webvoyager":
            verdict, text = client.ask(protocol.webvoyager_messages(self.question, answer, shots, self.screenshots),
                                       protocol.webvoyager_verdict)
            return bool(verdict), {"verdict": text, "screenshots_shown": shots[-self.screenshots:]}
        key_points, kp_text = client.ask(protocol.key_points_messages(self.question), protocol.parse_key_points)
        scored = []
        for shot in shots[-protocol.WEBJUDGE_MAX_IMAGES:]:
            (score, reason), _ = client.ask(protocol.image_messages(self.question, key_points, shot),
                                            protocol.parse_image_score)
            scored.append({"screenshot": shot, "score": score, "reason": reason})
        kept = [(s["screenshot"], s["reason"]) for s in scored if s["score"] >= protocol.WEBJUDGE_KEEP_SCORE]
        verdict, text = client.ask(protocol.outcome_messages(self.question, key_points, actions, kept, answer),
                                   protocol.parse_outcome)
        return bool(verdict), {"key_points": kp_text, "screenshots": scored, "outcome": text}
