"""In-memory proxy state: registered rollouts and the upstream pool (sticky choice, health)."""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from forge_cli.proxy import auth

ROLLOUT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
# request fields a rollout's registration may set over the proxy's sampling (``forge_sampling``)
SAMPLING_KEYS = frozenset({"temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty", "frequency_penalty",
                           "repetition_penalty"})


def rollout_sampling(value: Any) -> dict[str, Any]:
    """A registration's ``sampling`` (None: none): a JSON object of numeric sampling fields, else ValueError."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError("sampling: must be a JSON object such as {\"temperature\": 0.0}")
    unknown = sorted(set(value) - SAMPLING_KEYS)
    if unknown:
        raise ValueError(f"sampling: unknown field(s) {', '.join(unknown)} (known: {', '.join(sorted(SAMPLING_KEYS))})")
    for key, number in value.items():
        if isinstance(number, bool) or not isinstance(number, int | float):
            raise ValueError(f"sampling.{key}: must be a number")
    return dict(value)


def call_seed(seed: int, rollout: Rollout, seq: int) -> int:
    """The sampling seed of call ``seq`` of ``rollout`` under the run's ``seed``: the same for the same task, step,
    sample and call number (so two evaluations of the same tasks draw alike), different for every other call."""
    meta = rollout.meta or {}
    key = f"{seed}:{rollout.task or rollout.rollout_id}:{meta.get('step')}:{meta.get('sample')}:{seq}"
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") & 0x7FFFFFFF


@dataclass(slots=True)
class Rollout:
    """A registered rollout: its key digest, metadata, call counter and sticky upstream."""

    rollout_id: str
    key_digest: bytes
    task: str | None = None
    group_id: str | None = None
    harness: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    # sampling fields enforced on this rollout's calls over the proxy's own (empty: the proxy's)
    sampling: dict[str, Any] = field(default_factory=dict)
    created: float = field(default_factory=time.time)
    finished: float | None = None
    status: str = "running"
    next_seq: int = 0
    calls: int = 0
    failed: int = 0
    upstream: int | None = None

    def public(self) -> dict[str, Any]:
        """What the control API shows (never the key)."""
        return {"rollout_id": self.rollout_id, "task": self.task, "group_id": self.group_id, "harness": self.harness,
                "meta": self.meta, "sampling": self.sampling, "created": self.created, "finished": self.finished,
                "status": self.status, "calls": self.calls, "failed_calls": self.failed}


@dataclass(slots=True)
class Upstream:
    """One policy server."""

    url: str
    scheme: str
    host: str
    port: int
    prefix: str
    healthy: bool = True
    failed_at: float = 0.0
    assigned: int = 0
    hostport: bytes = b""

    def __post_init__(self) -> None:
        self.hostport = f"{self.host}:{self.port}".encode()

    @classmethod
    def parse(cls, url: str) -> Upstream:
        parts = urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"upstream must be an http(s) URL, got {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        prefix = parts.path.rstrip("/")
        if prefix.endswith("/v1"):
            prefix = prefix[:-3]
        return cls(url=url.strip().rstrip("/"), scheme=parts.scheme, host=parts.hostname, port=port, prefix=prefix)


class Registry:
    """Rollouts by id, the upstream pool, pause state and the weight version."""

    def __init__(self, upstreams: list[str]) -> None:
        self.rollouts: dict[str, Rollout] = {}
        self.upstreams = [Upstream.parse(u) for u in upstreams if u.strip()]
        self.weight_version = "0"
        self.paused = False

    def register(self, rollout_id: str | None, info: dict[str, Any]) -> tuple[Rollout, str]:
        """A new rollout and its key (returned once, kept only as a digest)."""
        rid = rollout_id or auth.new_secret("r-")[:18].replace("_", "x").replace("-", "x", 1)
        if not ROLLOUT_ID.match(rid):
            raise ValueError("rollout_id: letters, digits and . _ : - only (at most 128)")
        if rid in self.rollouts and self.rollouts[rid].finished is None:
            raise KeyError(rid)
        sampling = rollout_sampling(info.get("sampling"))
        key = auth.new_secret("fk-")
        rollout = Rollout(rollout_id=rid, key_digest=auth.digest(key), task=info.get("task"),
                          group_id=info.get("group_id"), harness=info.get("harness"), meta=info.get("meta") or {},
                          sampling=sampling)
        self.rollouts[rid] = rollout
        return rollout, key

    def pick(self, rollout: Rollout) -> Upstream:
        """The rollout's sticky upstream, moved to the least-loaded healthy one when it is unhealthy."""
        current = self.upstreams[rollout.upstream] if rollout.upstream is not None else None
        if current is not None and current.healthy:
            return current
        healthy = [u for u in self.upstreams if u.healthy]
        candidates = healthy or sorted(self.upstreams, key=lambda u: u.failed_at)[:1]
        choice = min(candidates, key=lambda u: u.assigned)
        if current is not None:
            current.assigned -= 1
        choice.assigned += 1
        rollout.upstream = self.upstreams.index(choice)
        return choice

    def mark_failed(self, url: str) -> None:
        for upstream in self.upstreams:
            if upstream.url == url:
                upstream.healthy = False
                upstream.failed_at = time.time()

    def by_url(self, url: str) -> Upstream | None:
        return next((u for u in self.upstreams if u.url == url), None)
