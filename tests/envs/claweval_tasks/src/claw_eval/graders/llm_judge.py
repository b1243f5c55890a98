"""Stand-in LLMJudge: asks an OpenAI-compatible endpoint for a score in [0, 1]."""

from __future__ import annotations

import httpx


class LLMJudge:
    def __init__(self, model_id: str, api_key: str, base_url: str) -> None:
        self.model_id, self.api_key, self.base_url = model_id, api_key, base_url.rstrip("/")

    def evaluate(self, prompt: str) -> float:
        resp = httpx.post(f"{self.base_url}/chat/completions", timeout=30,
                          json={"model": self.model_id, "messages": [{"role": "user", "content": prompt}]})
        return float(resp.json()["choices"][0]["message"]["content"].strip() or 0)
