"""No import circles in forge_cli: not between modules (at run time) and not between packages.

The graph is the one ``lint-imports`` builds (grimp). Imports under ``if TYPE_CHECKING:`` are left out of the
module check: they never run (``Task.verifier`` is a ``Verifier`` and a verifier's context holds the ``Task``, a
reference between two data types, not an import). Between packages, the only edges allowed to close a circle are
the deprecated aliases kept for stored run directories (``ALIASES``, ignored by the same name in ``pyproject.toml``):
nothing in forge imports them.
"""

from __future__ import annotations

import grimp

# modules kept only as old names of moved entry points (forge never imports them; veRL may, from a stored path)
ALIASES = {"forge_cli.train.verl.agent_loop", "forge_cli.train.verl.sampler"}


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in list(edges):
        if node not in index:
            visit(node)
    return out


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_no_module_imports_itself_through_others() -> None:
    graph = grimp.build_graph("forge_cli", exclude_type_checking_imports=True)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert _circles(edges) == []


def test_no_package_imports_itself_through_others() -> None:
    graph = grimp.build_graph("forge_cli")
    edges: dict[str, set[str]] = {}
    for module in graph.modules - ALIASES:
        for imported in graph.find_modules_directly_imported_by(module):
            if _package(module) != _package(imported):
                edges.setdefault(_package(module), set()).add(_package(imported))
    assert _circles(edges) == []
    # the aliases are what they say: nothing of forge imports them
    for alias in ALIASES:
        assert graph.find_modules_that_directly_import(alias) == set(), alias
