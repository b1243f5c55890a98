"""Call records from the proxy addon's frames: each call assembled into its ``calls`` row (the wire format parses
the upstream's answer here), then a batch of frames inserted into the store in one transaction.

Runs in the store writer process (``forge_cli/remote/mitmproxy/writer.py``, off mitmproxy's event loop); the wire
formats' conformance kit (``forge_cli/testing/wire.py``) checks a format's row with ``build_row``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from forge_cli.proxy.wire import FORMATS
from forge_cli.proxy.wire.base import Assembled, Prepared
from forge_cli.traces import frames, store
from forge_cli.traces.blobs import Blobs, extract


def _json_text(raw: bytes | None) -> str | None:
    """Body bytes as JSON text for a json column (non-JSON bodies become a JSON string)."""
    if raw is None:
        return None
    text = raw.decode("utf-8", "replace")
    stripped = text.lstrip()
    if stripped[:1] in ("{", "["):
        return text
    return json.dumps(text)


def _images_out(text: str | None, found: Blobs | None) -> str | None:
    return extract(text, found) if found is not None else text


def _dump(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _bindable(value: Any) -> Any:
    """A value SQLite can bind: anything else (a client's ``"model": [1]``, an upstream's ``"finish_reason": {}``)
    as JSON text; one such value once made every later commit fail and the writer exit."""
    if not (value is None or isinstance(value, int | float | str | bytes)):
        value = _dump(value)
    elif isinstance(value, int) and not -(1 << 63) <= value < (1 << 63):  # beyond SQLite's INTEGER
        value = str(value)
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:  # a lone surrogate ("\\ud800" in the client's JSON) cannot be bound either
            value = value.encode("utf-8", "replace").decode()
    return value


def build_row(meta: dict[str, Any], blobs: dict[str, bytes], found: Blobs | None = None) -> tuple[Any, ...]:
    """One ``calls`` row (``store.CALL_FIELDS`` order) from a call frame; the images its requests held are added to
    ``found`` (to be stored once with ``store.insert_blobs``); without ``found`` they stay inline."""
    values = _build_row(meta, blobs, found)
    if values.keys() != _FIELDS:  # every column named once, none unknown: checked against the schema, not by order
        raise ValueError(f"call row does not match the calls table: missing {sorted(_FIELDS - values.keys())}, "
                         f"unknown {sorted(values.keys() - _FIELDS)}")
    return tuple(_bindable(values[name]) for name in store.CALL_FIELDS)


_FIELDS = frozenset(store.CALL_FIELDS)


def _build_row(meta: dict[str, Any], blobs: dict[str, bytes], found: Blobs | None) -> dict[str, Any]:
    status: str = meta.get("status") or "ok"
    error: str | None = meta.get("error")
    prep = Prepared(body=b"", changed=True, wants_token_ids=bool(meta.get("wants_token_ids")),
                    wants_logprobs=bool(meta.get("wants_logprobs")))
    wire_format = FORMATS[meta["wire_format"]]
    upstream_body = blobs.get("response") or b""
    assembled: Assembled | None = None
    response_text: str | None = None
    if "client_response" in blobs:
        response_text = _json_text(blobs["client_response"])
    elif upstream_body:
        try:
            assembled = wire_format.assemble(upstream_body, bool(meta.get("stream")), prep)
        except Exception as exc:  # a broken upstream answer is recorded, never fatal
            error = error or f"unparseable upstream answer: {exc}"
            status = "incomplete" if status == "ok" else status
            response_text = _json_text(upstream_body)
    if assembled is not None:
        if not assembled.complete and status == "ok":
            status, error = "incomplete", error or "stream ended before its terminal event"
        response_text = _dump(assembled.response)
    model = meta.get("model")
    if model is None and assembled is not None and isinstance(assembled.response, dict):
        model = assembled.response.get("model")
    prompt_ids = assembled.prompt_token_ids if assembled else None
    completion_ids = assembled.completion_token_ids if assembled else None
    usage = usage_counts(assembled.response if assembled else None)
    return {
        "rollout_id": meta["rollout_id"], "seq": meta["seq"], "wire_format": meta["wire_format"],
        "path": meta.get("path"), "model": model, "stream": int(bool(meta.get("stream"))), "status": status,
        "error": error, "http_status": meta.get("http_status"), "upstream": meta.get("upstream"),
        "weight_version": meta.get("weight_version"),
        # images out of both requests, stored once in the blobs table (blobs.py); the requests keep references
        "request": _images_out(_json_text(blobs.get("request")), found),
        "upstream_request": _images_out(_json_text(blobs.get("upstream_request")), found), "response": response_text,
        "prompt_token_ids": _dump(prompt_ids), "completion_token_ids": _dump(completion_ids),
        "completion_logprobs": _dump(assembled.completion_logprobs if assembled else None),
        "finish_reason": assembled.finish_reason if assembled else None,
        "prompt_tokens": len(prompt_ids) if prompt_ids is not None else usage[0],
        "completion_tokens": len(completion_ids) if completion_ids is not None else usage[1],
        "headers": _dump(meta.get("headers")), "t_start": meta.get("t_start"),
        "t_first_byte": meta.get("t_first_byte"), "t_end": meta.get("t_end"),
        "request_bytes": len(blobs.get("request") or b""), "response_bytes": len(upstream_body),
    }


def usage_counts(response: Any) -> tuple[int | None, int | None]:
    """(prompt, completion) tokens an answer's usage reports, in any of the four wire formats (Chat Completions,
    Responses, Anthropic Messages, Gemini); the counts of an upstream that returns no token ids (an external API)."""
    if not isinstance(response, dict):
        return None, None
    usage = response.get("usage") or response.get("usageMetadata")
    if not isinstance(usage, dict):
        return None, None
    for prompt, completion in (("prompt_tokens", "completion_tokens"), ("input_tokens", "output_tokens"),
                               ("promptTokenCount", "candidatesTokenCount")):
        if isinstance(usage.get(prompt), int):
            value = usage.get(completion)
            return int(usage[prompt]), int(value) if isinstance(value, int) else None
    return None, None


def apply(conn: Any, bodies: list[bytes]) -> int:
    """Write a batch of frames in one transaction; returns the highest frame number written."""
    rows: list[tuple[Any, ...]] = []
    images: Blobs = {}
    top = 0
    for body in bodies:
        meta, blobs = frames.decode(body)
        top = max(top, int(meta.get("n", 0)))
        if meta.get("type") == "rollout":
            if rows:
                store.insert_calls(conn, rows)
                rows = []
            store.upsert_rollout(conn, meta["info"])
        elif meta.get("type") == "call":
            try:
                rows.append(build_row(meta, blobs, images))
            except Exception as exc:  # keep the call even if assembling it failed
                print(f"forge writer: record {meta.get('rollout_id')}#{meta.get('seq')}: {exc!r}", file=sys.stderr)
                meta["status"], meta["error"] = "incomplete", f"record assembly failed: {exc!r}"
                rows.append(build_row(meta, {"request": blobs.get("request", b""),
                                             "client_response": blobs.get("client_response", b"null")}, images))
    if rows:
        store.insert_calls(conn, rows)
    if images:
        store.insert_blobs(conn, images)
    conn.commit()
    return top
