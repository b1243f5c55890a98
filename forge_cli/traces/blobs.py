"""Images (and other large inline payloads) in records, stored once by content hash.

A harness that sends screenshots sends the same images again on every later call of its conversation. The store
writer (``remote/mitmproxy/writer.py``) takes each inline image out of a record's request JSON and keeps it once in the
store's ``blobs`` table, under its SHA-256; the request keeps the reference ``forge-blob:sha256:<hex>`` where the
string was. What is taken out, in all four wire formats:

- a ``data:<mime>;base64,...`` URL anywhere (Chat Completions ``image_url.url``, Responses ``input_image``'s
  ``image_url``);
- the base64 ``data`` of an object that names its media type (Anthropic ``{"type": "base64", "media_type",
  "data"}``, Gemini ``inlineData: {"mimeType", "data"}``).

Only payloads of at least ``MIN_CHARS`` are moved. The blob holds the base64 text itself (a data URL keeps its
``data:<mime>;base64,`` head in the record, followed by the reference), so the same image is one blob whatever
shape carried it: a client's Anthropic ``data`` and the Chat Completions data URL its call was translated into, or
the same screenshot under two media types. ``resolve`` gives the request back exactly as the client sent it
(``forge traces show``, the export). Stdlib only: the store writer runs in mitmproxy's
environment.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

PREFIX = "forge-blob:sha256:"
MIN_CHARS = 1024
MEDIA_KEYS = ("media_type", "mimeType", "mime_type")
# texts without these cannot hold an inline image: skip parsing them
_MARKERS = ("data:", '"data"')

Blobs = dict[str, tuple[str, bytes]]  # sha256 hex -> (media type, the base64 text's UTF-8 bytes)


def _take(value: str, mime: str, found: Blobs) -> str:
    raw = value.encode("utf-8", "surrogatepass")
    digest = hashlib.sha256(raw).hexdigest()
    found.setdefault(digest, (mime, raw))
    return PREFIX + digest


def _walk(node: Any, found: Blobs) -> Any:
    if isinstance(node, dict):
        media = next((node[k] for k in MEDIA_KEYS if isinstance(node.get(k), str)), None)
        out = {}
        for key, value in node.items():
            if key == "data" and media is not None and isinstance(value, str) and len(value) >= MIN_CHARS:
                out[key] = _take(value, media, found)
            else:
                out[key] = _walk(value, found)
        return out
    if isinstance(node, list):
        return [_walk(v, found) for v in node]
    if isinstance(node, str) and len(node) >= MIN_CHARS and node.startswith("data:") and ";base64," in node[:200]:
        head = node[:node.index(";base64,") + 8]
        return head + _take(node[len(head):], node[5:node.index(";")], found)
    return node


def extract(text: str | None, found: Blobs) -> str | None:
    """``text`` (a JSON body) with its inline images replaced by references, the images added to ``found``;
    unchanged when it holds none (or is not JSON)."""
    # every shape holds "data" (a data URL, Anthropic's and Gemini's key): one scan rules most texts out (a scan of
    # a 50 KB prompt costs tens of microseconds on a slow CPU, per marker)
    if text is None or len(text) < MIN_CHARS or "data" not in text or not any(m in text for m in _MARKERS):
        return text
    try:
        body = json.loads(text)
    except ValueError:
        return text
    taken: Blobs = {}
    replaced = _walk(body, taken)
    if not taken:
        return text
    for digest, blob in taken.items():
        found.setdefault(digest, blob)
    return json.dumps(replaced, separators=(",", ":"), ensure_ascii=False)


def refs(text: str | None) -> set[str]:
    """The blob hashes a stored JSON text references."""
    out: set[str] = set()
    if not text or PREFIX not in text:
        return out
    start = 0
    while (i := text.find(PREFIX, start)) >= 0:
        out.add(text[i + len(PREFIX):i + len(PREFIX) + 64])
        start = i + len(PREFIX)
    return out


def resolve(node: Any, lookup: Callable[[str], bytes | None]) -> Any:
    """``node`` with every reference replaced by its blob's string (a missing blob leaves the reference)."""
    if isinstance(node, str):
        at = node.find(PREFIX)
        # the whole string (a base64 ``data``), or what follows a data URL's head
        if at == 0 or (at > 0 and node.startswith("data:") and node[:at].endswith(";base64,")):
            raw = lookup(node[at + len(PREFIX):])
            return node[:at] + raw.decode("utf-8", "surrogatepass") if raw is not None else node
        return node
    if isinstance(node, dict):
        return {k: resolve(v, lookup) for k, v in node.items()}
    if isinstance(node, list):
        return [resolve(v, lookup) for v in node]
    return node
