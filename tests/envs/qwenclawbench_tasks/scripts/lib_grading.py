"""Stand-in for QwenClawBench's scripts/lib_grading.py (same interface and scoring rules; written for forge's tests)."""

import json
import os
import re
import time
import urllib.request
from dataclasses import dataclass
from math import comb
from typing import Any

DEFAULT_JUDGE_MODEL = "judge"
DEFAULT_JUDGE_AGENT_PREFIX = "bench-judge"
JUDGE_API_MAX_RETRIES = 100
JUDGE_API_RETRY_BASE_SECONDS = 5
AUTO_PENALTY_THRESHOLD = 0.75


@dataclass
class GradeResult:
    task_id: str
    score: float
    max_score: float
    grading_type: str
    breakdown: dict
    notes: str
    score_simple: Any = None

    def to_dict(self) -> dict:
        return {"task_id": self.task_id, "score": self.score,
                "score_simple": self.score if self.score_simple is None else self.score_simple,
                "max_score": self.max_score, "grading_type": self.grading_type, "breakdown": self.breakdown,
                "notes": self.notes}


def _load_openclaw_env(*args: Any) -> dict:
    return {}


def _grade_automated(task: Any, execution_result: dict, verbose: bool = False) -> GradeResult:
    code = re.search(r"```python\s*\n(.*?)\n\s*```", task.automated_checks or "", re.DOTALL)
    namespace: dict = {}
    exec(code.group(1) if code else "", namespace)
    scores = namespace["grade"](execution_result.get("transcript", []), execution_result.get("workspace", ""))
    values = [float(v) for v in scores.values() if isinstance(v, (int, float))]
    return GradeResult(task.task_id, sum(values) / len(values) if values else 0.0, 1.0, "automated",
                       {k: float(v) for k, v in scores.items()}, "")


def _call_llm_judge_api(prompt: str, model: str, base_url: str, api_key: str, timeout_seconds: float = 60) -> str:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": prompt}]}).encode()
    req = urllib.request.Request(base_url.rstrip("/") + "/chat/completions", data=body, method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {api_key}"})
    with urllib.request.urlopen(req, timeout=timeout_seconds) as resp:
        return json.loads(resp.read())["choices"][0]["message"]["content"]


def _ensure_judge_agent(*args: Any) -> str:
    raise RuntimeError("no OpenClaw judge agent in the stand-in")


def _grade_llm_judge(*, task: Any, execution_result: dict, judge_model: str, judge_agent_prefix: str,
                     judge_timeout_seconds: float, skill_dir: Any, verbose: bool = False) -> GradeResult:
    base_url, api_key = os.environ.get("JUDGE_BASE_URL"), os.environ.get("JUDGE_API_KEY")
    if not base_url or not api_key:
        raise RuntimeError("LLM judge requires JUDGE_BASE_URL and JUDGE_API_KEY.")
    prompt = f"## Task\n{task.prompt}\n## Grading Rubric\n{task.llm_judge_rubric}\n"
    for attempt in range(JUDGE_API_MAX_RETRIES):
        if attempt:
            time.sleep(JUDGE_API_RETRY_BASE_SECONDS * 2 ** (attempt - 1))
        try:
            parsed = json.loads(_call_llm_judge_api(prompt, judge_model, base_url, api_key, judge_timeout_seconds))
            return GradeResult(task.task_id, float(parsed.get("total", 0.0)), 1.0, "llm_judge",
                               parsed.get("scores", {}), str(parsed.get("notes", "")))
        except Exception:
            continue
    _ensure_judge_agent(judge_agent_prefix, judge_model, skill_dir)
    raise RuntimeError("unreachable")


def _combine_grades(task: Any, auto: GradeResult, llm: GradeResult) -> GradeResult:
    w = task.grading_weights or {"automated": 0.5, "llm_judge": 0.5}
    wa, wl = float(w.get("automated", 0.5)), float(w.get("llm_judge", 0.5))
    simple = (auto.score * wa + llm.score * wl) / (wa + wl)
    llm_adj = 0.0 if auto.score < AUTO_PENALTY_THRESHOLD else llm.score
    breakdown = {**{f"automated.{k}": v for k, v in auto.breakdown.items()},
                 **{f"llm_judge.{k}": v for k, v in llm.breakdown.items()}}
    return GradeResult(task.task_id, (auto.score * wa + llm_adj * wl) / (wa + wl), 1.0, "hybrid", breakdown,
                       " | ".join(filter(None, [auto.notes, llm.notes])), simple)


def pass_k_stats(grades_by_task_id: dict, runs_per_task: int) -> dict:
    out: dict = {}
    for k in range(1, runs_per_task + 1):
        at, hat = [], []
        for g in grades_by_task_id.values():
            n = len(g.get("runs", []))
            c = sum(1 for r in g["runs"] if r.get("score", 0) >= 1.0 - 1e-9)
            at.append(0.0 if n < k else 1.0 if c >= n else 1.0 - comb(n - c, k) / comb(n, k))
            hat.append(0.0 if n < k else comb(c, k) / comb(n, k))
        out[f"pass@{k}"] = round(sum(at) / len(at), 4) if at else 0.0
        out[f"pass^{k}"] = round(sum(hat) / len(hat), 4) if hat else 0.0
    return out
