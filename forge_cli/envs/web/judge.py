"""Web-task judges over a rollout's screenshots and answer, as the benchmarks publish them, through any
OpenAI-compatible multimodal endpoint (``eval.judge``).

- ``webvoyager``: WebVoyager's automatic evaluation: one call with the task, the agent's final answer and the last
  ``k`` screenshots; the judge reasons and ends with SUCCESS or NOT SUCCESS.
- ``webjudge``: Online-Mind2Web's WebJudge, three stages: (1) the key points the task states; (2) each screenshot
  (at most 50, the last ones) scored 1-5 for how much it shows of them, with its reasons; (3) the outcome from the
  task, key points, the actions taken and the screenshots scoring at least 3 (with their reasons): success or
  failure.

The prompts are forge's own wording of those protocols (neither benchmark's text is copied). Parsing is strict: a
judge answer that does not follow the asked format is retried and, after ``retries``, the trial is not judged. Pure
functions build the messages and read the answers; :class:`JudgeClient` sends them.
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

WEBJUDGE_MAX_IMAGES = 50
WEBJUDGE_KEEP_SCORE = 3
Message = dict[str, Any]


class JudgeDown(Exception):
    """The judge endpoint could not give a usable answer (unreachable, errors, unparsable): not judged."""


def image_part(path: str) -> dict[str, Any]:
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}


# ---------------------------------------------------------------- WebVoyager
WEBVOYAGER_SYSTEM = (
    "You judge whether a web agent completed an online task. You get the task, the agent's final answer and "
    "screenshots of the browser at the end of its work. The screenshots are the evidence: an answer that they "
    "contradict or do not support is not a success, and so is a task with several parts of which one is missing. "
    "Explain briefly, then end with exactly one line: 'SUCCESS' or 'NOT SUCCESS'.")


def webvoyager_messages(task: str, answer: str, screenshots: Sequence[str], k: int) -> list[Message]:
    shots = list(screenshots)[-k:] if k > 0 else []
    content: list[dict[str, Any]] = [{"type": "text", "text": f"TASK: {task}\nRESULT RESPONSE: {answer}\n"
                                                              f"{len(shots)} screenshot(s) follow."}]
    content += [image_part(p) for p in shots]
    return [{"role": "system", "content": WEBVOYAGER_SYSTEM}, {"role": "user", "content": content}]


def webvoyager_verdict(text: str) -> bool:
    """SUCCESS / NOT SUCCESS from the judge's last such line; ValueError when there is none."""
    found = re.findall(r"\b(NOT SUCCESS|SUCCESS)\b", text)
    if not found:
        raise ValueError("no SUCCESS / NOT SUCCESS in the judge's answer")
    return found[-1] == "SUCCESS"


# ---------------------------------------------------------------- WebJudge (Online-Mind2Web)
KEY_POINTS_SYSTEM = (
    "List the key points a web task states explicitly: each condition, value or step it names that a correct "
    "outcome must satisfy. Add nothing the task does not state. Answer with 'Key Points:' followed by a numbered "
    "list.")
IMAGE_SYSTEM = (
    "You rate one screenshot of a web agent's work on a task. Given the task and its key points, say how much the "
    "screenshot shows of what is needed to complete it, from 1 (nothing relevant) to 5 (shows a necessary step or "
    "the completed result). Answer with 'Reasoning:' and a short explanation, then a line 'Score: N'.")
OUTCOME_SYSTEM = (
    "You decide whether a web agent completed a task. You get the task, its key points, the actions the agent took, "
    "and the screenshots that mattered with why. Every key point must be met, as the task states it (values, "
    "filters, order); an action history that only claims success is not enough. Explain briefly, then end with "
    "one line: 'Status: success' or 'Status: failure'.")


def key_points_messages(task: str) -> list[Message]:
    return [{"role": "system", "content": KEY_POINTS_SYSTEM}, {"role": "user", "content": f"Task: {task}"}]


def parse_key_points(text: str) -> str:
    _, sep, rest = text.partition("Key Points:")
    points = (rest if sep else text).strip()
    if not points:
        raise ValueError("the judge named no key points")
    return points


def image_messages(task: str, key_points: str, screenshot: str) -> list[Message]:
    return [{"role": "system", "content": IMAGE_SYSTEM},
            {"role": "user", "content": [{"type": "text", "text": f"Task: {task}\nKey points:\n{key_points}"},
                                         image_part(screenshot)]}]


def parse_image_score(text: str) -> tuple[int, str]:
    match = re.search(r"Score:\s*([1-5])", text)
    if not match:
        raise ValueError("no 'Score: N' in the judge's answer")
    reason = text.split("Score:")[0].replace("Reasoning:", "").strip()
    return int(match.group(1)), reason


def outcome_messages(task: str, key_points: str, actions: Sequence[str], kept: Sequence[tuple[str, str]],
                     answer: str) -> list[Message]:
    listed = "\n".join(f"{i + 1}. {a}" for i, a in enumerate(actions)) or "(none)"
    content: list[dict[str, Any]] = [{"type": "text", "text": (
        f"Task: {task}\nKey points:\n{key_points}\nActions taken:\n{listed}\nFinal answer: {answer}\n"
        f"{len(kept)} screenshot(s) follow, each after the reason it matters.")}]
    for path, reason in kept:
        content += [{"type": "text", "text": f"Why it matters: {reason}"}, image_part(path)]
    return [{"role": "system", "content": OUTCOME_SYSTEM}, {"role": "user", "content": content}]


def parse_outcome(text: str) -> bool:
    found = re.findall(r"Status:\s*\"?(success|failure)", text, flags=re.IGNORECASE)
    if not found:
        raise ValueError("no 'Status: success|failure' in the judge's answer")
    return found[-1].lower() == "success"


# ---------------------------------------------------------------- the endpoint
@dataclass
class JudgeClient:
    """Chat Completions calls to the judge, each retried ``retries`` times on errors and unparsable answers."""

    base_url: str
    model: str
    api_key: str | None = None
    retries: int = 3
    retry_base_s: float = 2.0
    timeout_s: float = 120.0

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> JudgeClient:
        if not settings.get("base_url") or not settings.get("model"):
            raise JudgeDown("no judge is configured (eval.judge.base_url and eval.judge.model)")
        return cls(str(settings["base_url"]).rstrip("/"), str(settings["model"]), settings.get("api_key"),
                   int(settings.get("retries") or 3), float(settings.get("retry_base_s") or 0.0),
                   float(settings.get("timeout_s") or 120.0))

    def ask(self, messages: list[Message], parse: Any) -> tuple[Any, str]:
        """``parse(text)`` of the judge's answer, and the text; JudgeDown after ``retries`` failed attempts."""
        last = ""
        for attempt in range(self.retries):
            if attempt:
                time.sleep(self.retry_base_s * 2 ** (attempt - 1))
            try:
                answer = httpx.post(f"{self.base_url}/chat/completions", timeout=self.timeout_s,
                                    headers={"Authorization": f"Bearer {self.api_key or 'EMPTY'}"},
                                    json={"model": self.model, "messages": messages, "temperature": 0})
                answer.raise_for_status()
                text = str(answer.json()["choices"][0]["message"]["content"] or "")
            except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
                last = f"{type(exc).__name__}: {exc}"
                continue
            try:
                return parse(text), text
            except ValueError as exc:
                last = f"{exc}: {text[-300:]!r}"
        raise JudgeDown(f"the judge at {self.base_url} gave no usable answer in {self.retries} attempt(s) ({last})")
