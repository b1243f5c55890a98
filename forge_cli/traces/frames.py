"""The frame format between the proxy addon and its writer process (length-prefixed, stdlib only).

frame = u32 total length | u32 meta length | meta | (u32 length | bytes) for each name in meta["blobs"]

``meta`` is a ``marshal``-encoded dict (several times faster than JSON on the proxy's event loop); both
ends run the same interpreter, since the addon starts the writer with its own ``sys.executable``.
"""

from __future__ import annotations

import marshal
import struct
from typing import Any

_U32 = struct.Struct(">I")


def encode(meta: dict[str, Any], blobs: dict[str, bytes]) -> bytes:
    """One frame; ``meta["blobs"]`` is set to the blob names in order."""
    meta["blobs"] = list(blobs)
    head = marshal.dumps(meta)
    parts = [_U32.pack(len(head)), head]
    for blob in blobs.values():
        parts.append(_U32.pack(len(blob)))
        parts.append(blob)
    body = b"".join(parts)
    return _U32.pack(len(body)) + body


def decode(body: bytes) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Meta and blobs of one frame body (without its total-length prefix)."""
    (n,) = _U32.unpack_from(body, 0)
    meta = marshal.loads(body[4:4 + n])
    pos = 4 + n
    blobs: dict[str, bytes] = {}
    for name in meta.get("blobs", ()):
        (size,) = _U32.unpack_from(body, pos)
        blobs[name] = body[pos + 4:pos + 4 + size]
        pos += 4 + size
    return meta, blobs


def split(buf: bytearray) -> list[bytes]:
    """Complete frame bodies at the start of ``buf`` (consumed from it)."""
    out: list[bytes] = []
    pos = 0
    while len(buf) - pos >= 4:
        (size,) = _U32.unpack_from(buf, pos)
        if len(buf) - pos - 4 < size:
            break
        out.append(bytes(buf[pos + 4:pos + 4 + size]))
        pos += 4 + size
    del buf[:pos]
    return out
