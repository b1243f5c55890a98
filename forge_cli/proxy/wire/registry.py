"""The wire formats by name (``base.WIRE_FORMATS``, filled by each format's ``register_wire_format``): the table the
addon and the store writer look formats up in, by the name records carry in ``wire_format``; and routing a client
path to the format that serves it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from forge_cli.proxy.wire.base import WIRE_FORMATS, WireFormat


class _Formats(Mapping[str, WireFormat]):
    """Every registered wire format by name, read from the registry (forge's own and installed packages')."""

    def __getitem__(self, name: str) -> WireFormat:
        if name in WIRE_FORMATS:
            return WIRE_FORMATS.get(name)
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return iter(WIRE_FORMATS.names())

    def __len__(self) -> int:
        return len(WIRE_FORMATS.names())


FORMATS: Mapping[str, WireFormat] = _Formats()
# client path -> format for the formats' fixed paths, and the formats that match paths beyond them; rebuilt when a
# format is registered (the registry's version changes)
_tables: tuple[int, dict[str, WireFormat], tuple[WireFormat, ...]] = (-1, {}, ())


def _routes() -> tuple[dict[str, WireFormat], tuple[WireFormat, ...]]:
    global _tables
    WIRE_FORMATS.load_all()
    if _tables[0] != WIRE_FORMATS.version:
        formats = [fmt for _, fmt in WIRE_FORMATS.items()]
        _tables = (WIRE_FORMATS.version, {path: f for f in formats for path in f.paths},
                   tuple(f for f in formats if f.matches is not None))
    return _tables[1], _tables[2]


def route(path: str) -> WireFormat | None:
    """The wire format serving a client path (after the ``/r/<id>`` prefix; query dropped), if any."""
    paths, matchers = _routes()
    route_path = path.split("?", 1)[0].rstrip("/")
    found = paths.get(route_path)
    if found is None:
        for fmt in matchers:
            if fmt.matches is not None and fmt.matches(route_path):
                return fmt
    return found


def format_for_path(path: str) -> str:
    """Best guess of the wire format for error shapes, even for paths that are not served."""
    if "/messages" in path:
        return "anthropic"
    route_path = path.split("?", 1)[0]
    return "gemini" if "/v1beta/" in route_path or ("/models/" in route_path and ":" in route_path) else "chat"
