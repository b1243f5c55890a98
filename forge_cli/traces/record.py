"""The ``CallRecord``: one model call as the proxy saw it, token-exact.

Schema (also the column order of the store, the JSONL keys and the Parquet schema):

=====================  ===========  ==================================================================
field                  type         meaning
=====================  ===========  ==================================================================
id                     int64        row id in this store (monotonic per store)
rollout_id             string       the ``/r/<id>`` the harness called through
seq                    int32        0-based order of the call within its rollout (by arrival)
wire_format            string       ``chat`` | ``responses`` | ``anthropic`` | ``gemini`` (the client's API)
path                   string       client path after the ``/r/<id>`` prefix, e.g. ``/v1/messages``
model                  string       model name the client asked for
stream                 bool         the answer was streamed (SSE)
status                 string       ``ok`` | ``upstream_error`` | ``client_abort`` | ``incomplete``
error                  string       what went wrong (null when ok)
http_status            int32        status the client received (null when none was sent)
upstream               string       policy server base URL that served the call
weight_version         string       policy weight version stamped when the call was forwarded
request                json         the client's request body as received (credentials never included)
upstream_request       json         the body forwarded upstream when it differs (translation, capture)
response               json         the complete answer in the client's wire format (streams assembled)
prompt_token_ids       list<int32>  token ids of the rendered prompt, from the policy server
completion_token_ids   list<int32>  sampled token ids, from the policy server
completion_logprobs    list<float>  logprob of each sampled token (same length as completion ids)
finish_reason          string       ``stop`` | ``length`` | ``tool_calls`` | … (upstream's)
prompt_tokens          int32        len(prompt_token_ids); with no ids (an external API), its usage count
completion_tokens      int32        len(completion_token_ids); with no ids, its usage count
headers                json         request headers minus credentials (session ids, traceparent, …)
t_start                float64      unix time the request was complete at the proxy
t_first_byte           float64      unix time the first response byte arrived from the upstream
t_end                  float64      unix time the call ended
request_bytes          int64        size of the client's request body
response_bytes         int64        size of the upstream's answer body
=====================  ===========  ==================================================================
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any

STATUSES = ("ok", "upstream_error", "client_abort", "incomplete")

# (name, SQLite type, Arrow type) in column order
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("id", "INTEGER PRIMARY KEY", "int64"),
    ("rollout_id", "TEXT NOT NULL", "string"),
    ("seq", "INTEGER NOT NULL", "int32"),
    ("wire_format", "TEXT NOT NULL", "string"),
    ("path", "TEXT", "string"),
    ("model", "TEXT", "string"),
    ("stream", "INTEGER", "bool"),
    ("status", "TEXT NOT NULL", "string"),
    ("error", "TEXT", "string"),
    ("http_status", "INTEGER", "int32"),
    ("upstream", "TEXT", "string"),
    ("weight_version", "TEXT", "string"),
    ("request", "TEXT", "json"),
    ("upstream_request", "TEXT", "json"),
    ("response", "TEXT", "json"),
    ("prompt_token_ids", "TEXT", "list<int32>"),
    ("completion_token_ids", "TEXT", "list<int32>"),
    ("completion_logprobs", "TEXT", "list<float>"),
    ("finish_reason", "TEXT", "string"),
    ("prompt_tokens", "INTEGER", "int32"),
    ("completion_tokens", "INTEGER", "int32"),
    ("headers", "TEXT", "json"),
    ("t_start", "REAL", "float64"),
    ("t_first_byte", "REAL", "float64"),
    ("t_end", "REAL", "float64"),
    ("request_bytes", "INTEGER", "int64"),
    ("response_bytes", "INTEGER", "int64"),
)
JSON_COLUMNS = frozenset(n for n, _, a in COLUMNS if a == "json" or a.startswith("list<"))


def _loads(text: str) -> Any:
    """A JSON column's value; a body that was not valid JSON (forwarded unparsed, rejected upstream) stays text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


@dataclass(slots=True)
class CallRecord:
    """One model call; JSON columns hold Python objects here, JSON text in the store."""

    rollout_id: str
    seq: int
    wire_format: str
    status: str
    path: str | None = None
    model: str | None = None
    stream: bool = False
    error: str | None = None
    http_status: int | None = None
    upstream: str | None = None
    weight_version: str | None = None
    request: Any = None
    upstream_request: Any = None
    response: Any = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    completion_logprobs: list[float] | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    headers: dict[str, str] | None = None
    t_start: float | None = None
    t_first_byte: float | None = None
    t_end: float | None = None
    request_bytes: int | None = None
    response_bytes: int | None = None
    id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain dict in schema column order."""
        data = asdict(self)
        return {name: data[name] for name, _, _ in COLUMNS}

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> CallRecord:
        """From a store row (JSON text columns parsed)."""
        names = {f.name for f in fields(cls)}
        values = {k: (_loads(v) if k in JSON_COLUMNS and isinstance(v, str) else v)
                  for k, v in row.items() if k in names}
        if values.get("stream") is not None:
            values["stream"] = bool(values["stream"])
        return cls(**values)

    @property
    def latency_s(self) -> float | None:
        """End-to-end duration at the proxy."""
        if self.t_start is None or self.t_end is None:
            return None
        return self.t_end - self.t_start
