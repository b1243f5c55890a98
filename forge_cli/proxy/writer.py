"""The store writer: a separate process fed by the proxy addon through a pipe.

``python -m forge_cli.proxy.writer STORE`` reads frames (``frames.py``) from stdin, assembles each call
record (wire-format parsing happens here, off mitmproxy's event loop), inserts everything that has
arrived in one transaction and then writes the highest committed frame number to stdout. Commits are grouped: the
frames that arrive within ``GROUP_S`` of the first uncommitted one share a transaction (each commit rewrites the
table's and indexes' changed pages; a commit per call or two cost twice the CPU per record of batches of 16 at
16 concurrent calls, ``benchmarks/proxy.py``). A record is
safe once it is in the pipe: if mitmdump dies (even ``kill -9``) this process still reads what the pipe
holds, commits it and exits at end of input.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
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


GROUP_S = 0.02  # how long the first frame of a transaction waits for others
GROUP_BYTES = 8 << 20  # a transaction is committed once it holds this much, however soon


def _commit(conn: Any, bodies: list[bytes]) -> int:
    for attempt in range(50):
        try:
            return apply(conn, bodies)
        except Exception as exc:  # e.g. "database is locked" beyond busy_timeout: retry, never drop
            conn.rollback()
            print(f"forge writer: commit failed ({exc!r}), retry {attempt + 1}", file=sys.stderr)
            time.sleep(0.2)
    raise SystemExit("forge writer: could not commit records")


def run(path: str, fd_in: int = 0, fd_out: int = 1, group_s: float = GROUP_S) -> None:
    """Read frames until end of input, committing them in groups (``GROUP_S``, ``GROUP_BYTES``)."""
    conn = store.open_store(path)
    buf = bytearray()
    pending: list[bytes] = []
    pending_bytes = 0
    first = 0.0
    acks = True
    eof = False
    while not eof or pending:
        wait = first + group_s - time.monotonic() if pending else None
        if not eof and (wait is None or (wait > 0 and select.select([fd_in], [], [], wait)[0])):
            chunk = os.read(fd_in, 1 << 22)
            if not chunk:
                eof = True
            buf += chunk
            bodies = frames.split(buf)
            if bodies and not pending:
                first = time.monotonic()
            pending += bodies
            pending_bytes += sum(len(b) for b in bodies)
            if not eof and pending_bytes < GROUP_BYTES and time.monotonic() < first + group_s:
                continue
        if not pending:
            continue
        top = _commit(conn, pending)
        pending, pending_bytes = [], 0
        if acks:
            try:
                os.write(fd_out, f"{top}\n".encode())
            except OSError:  # the proxy is gone: keep draining and committing what the pipe holds
                acks = False
    conn.close()


if __name__ == "__main__":
    # Ctrl-C reaches the whole process group: this process ends at end of input, after its last commit
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    run(sys.argv[1])
