"""The registry of wire formats (``WireFormat``, defined in ``base.py``): the one table the addon and the store
writer look formats up in, by the name records carry in ``wire_format``."""

from __future__ import annotations

from forge_cli.proxy.wire import anthropic, chat, gemini, responses
from forge_cli.proxy.wire.base import WireFormat

FORMATS: dict[str, WireFormat] = {f.name: f for f in (chat.FORMAT, responses.FORMAT, anthropic.FORMAT,
                                                       gemini.FORMAT)}
# client path -> format, for the formats' fixed paths
_PATHS: dict[str, WireFormat] = {path: f for f in FORMATS.values() for path in f.paths}
_MATCHERS = tuple(f for f in FORMATS.values() if f.matches is not None)


def route(path: str) -> WireFormat | None:
    """The wire format serving a client path (after the ``/r/<id>`` prefix; query dropped), if any."""
    route_path = path.split("?", 1)[0].rstrip("/")
    found = _PATHS.get(route_path)
    if found is None:
        for fmt in _MATCHERS:
            if fmt.matches is not None and fmt.matches(route_path):
                return fmt
    return found


def format_for_path(path: str) -> str:
    """Best guess of the wire format for error shapes, even for paths that are not served."""
    if "/messages" in path:
        return "anthropic"
    route_path = path.split("?", 1)[0]
    return "gemini" if "/v1beta/" in route_path or ("/models/" in route_path and ":" in route_path) else "chat"
