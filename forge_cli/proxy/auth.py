"""Per-rollout keys and the admin token: random, compared in constant time, kept only as digests in memory."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping
from urllib.parse import unquote

# request headers that carry credentials: never forwarded upstream as-is, never recorded
CREDENTIAL_HEADERS = frozenset({
    "authorization", "x-api-key", "x-goog-api-key", "proxy-authorization", "cookie", "api-key",
})


def new_secret(prefix: str) -> str:
    """A fresh random key (256 bits)."""
    return prefix + secrets.token_urlsafe(32)


def digest(secret: str) -> bytes:
    """What is kept of a key: its SHA-256."""
    return hashlib.sha256(secret.encode("utf-8", "surrogateescape")).digest()


def matches(presented: str | None, expected: bytes) -> bool:
    """Constant-time comparison of a presented key against a stored digest."""
    if not presented:
        return False
    return hmac.compare_digest(digest(presented), expected)


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The key a client sent: ``Authorization: Bearer``, ``x-api-key`` or ``x-goog-api-key``."""
    auth = headers.get("authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        return value.strip() if scheme.lower() == "bearer" else None
    return headers.get("x-api-key") or headers.get("x-goog-api-key")


def pop_query_key(path: str) -> tuple[str, str | None]:
    """``path`` without a ``key=`` query parameter (Gemini API clients' alternative to ``x-goog-api-key``), and
    the key; the path kept for the record then never holds it."""
    route, sep, query = path.partition("?")
    if not sep or "key=" not in query:
        return path, None
    key = None
    kept = []
    for item in query.split("&"):
        if item.startswith("key="):
            key = unquote(item[4:])
        else:
            kept.append(item)
    return (route + "?" + "&".join(kept) if kept else route), key


def recordable_headers(headers: Mapping[str, str], keep: frozenset[str]) -> dict[str, str]:
    """Headers worth keeping in a record (session ids, traceparent, user agent), never credentials."""
    return {k: v for k, v in headers.items() if k.lower() in keep and k.lower() not in CREDENTIAL_HEADERS}
