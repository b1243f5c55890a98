"""Building blocks of the typed configuration: the strict base model and the value parsers it shares."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgt]i?)?b?$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4,
          "ki": 1024, "mi": 1024**2, "gi": 1024**3, "ti": 1024**4}


def parse_memory(text: str) -> int:
    """'512m', '4g', '2Gi' or a byte count → bytes; ValueError on anything else."""
    match = _MEMORY.match(str(text).strip())
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"'{text}' is not a memory size (examples: 512m, 4g, 2Gi)")
    return int(float(match.group(1)) * _UNITS[(match.group(2) or "").lower()])


def upstream_urls(text: str) -> list[str]:
    """'http://a:8000/v1,http://b:8001' → its URLs; ValueError naming the first that is not an http(s) URL."""
    from urllib.parse import urlsplit

    urls = [u.strip() for u in str(text).split(",") if u.strip()]
    if not urls:
        raise ValueError("no policy server URL given (example: http://127.0.0.1:8000)")
    for url in urls:
        try:
            parts = urlsplit(url)
            ok = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
        except ValueError:  # a port out of range, a malformed IPv6 address
            ok = False
        if not ok:
            raise ValueError(f"{url!r} is not an http(s) URL with a host and a port in 1-65535 "
                             "(example: http://127.0.0.1:8000)")
    return urls


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
