"""The policy server's own token counters, read from vLLM's Prometheus endpoint (``GET /metrics``).

``forge train`` reads them around each step's rollouts (``sampled_tokens``: completion tokens vLLM generated, the
budget ``trainer.max_sampled_tokens`` counts; ``prefill_tokens_computed``: prompt tokens it computed rather than
found in its prefix cache), so a step's figures are what the engine did, not what forge's records add up to: a call
a harness abandoned, a refused replay or a retried request all count where vLLM counted them. A policy server forge
did not start (``model=openai-compatible``) may expose no counters: then there are none (``{}``), never zeros.
"""

from __future__ import annotations

import re

# vLLM's counter names (v1 engine) and the name forge reports each under
COUNTERS = {
    "vllm:generation_tokens_total": "sampled_tokens",
    "vllm:prompt_tokens_total": "prompt_tokens",
}
# prompt tokens by where they came from: local_compute is what the engine prefilled itself
BY_SOURCE = "vllm:prompt_tokens_by_source_total"
# one sample line: name, optional {labels}, value (comments and types start with #)
SAMPLE = re.compile(r"^([A-Za-z_:][\w:]*)(\{[^}]*\})?\s+(\S+)")


def parse(text: str) -> dict[str, float]:
    """Prometheus text -> forge's counter names, each summed over its label sets (one per engine)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match is None:
            continue
        name, labels = match.group(1), match.group(2) or ""
        try:
            number = float(match.group(3))
        except ValueError:
            continue
        if name in COUNTERS:
            out[COUNTERS[name]] = out.get(COUNTERS[name], 0.0) + number
        elif name == BY_SOURCE and 'source="local_compute"' in labels:
            out["prefill_tokens_computed"] = out.get("prefill_tokens_computed", 0.0) + number
    return out


def read_counters(url: str, timeout: float = 5.0) -> dict[str, float]:
    """The counters of the vLLM server at ``url`` (its root, no ``/v1``); ``{}`` when it exposes none."""
    import httpx

    try:
        response = httpx.get(url.rstrip("/").removesuffix("/v1") + "/metrics", timeout=timeout)
    except httpx.HTTPError:
        return {}
    return parse(response.text) if response.status_code == 200 else {}


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """What happened between two readings (only counters both have; a restarted server's reset is not negative
    work: the later reading then counts from zero)."""
    return {k: (after[k] - before[k] if after[k] >= before[k] else after[k]) for k in after if k in before}
