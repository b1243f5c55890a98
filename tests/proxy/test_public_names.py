"""forge's proxy uses mitmproxy through public names only: no import of, access to or assignment to a ``_``-prefixed
mitmproxy module, class or attribute anywhere in ``forge_cli/proxy`` or in its process entry points
(``forge_cli/remote/mitmproxy``) (what remains below mitmproxy's hooks is in
``transport.py``, through public attributes, with the reasons in its docstring)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "forge_cli"
PROXY = PACKAGE / "proxy"
ENTRY = PACKAGE / "remote" / "mitmproxy"  # the proxy process (mitmproxy's master) and its store writer


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_mitmproxy_uses(source: str) -> list[str]:
    """Every use of a private mitmproxy name in ``source`` (a line each)."""
    tree = ast.parse(source)
    found: list[str] = []
    bound: set[str] = set()  # local names bound to mitmproxy modules or objects
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "mitmproxy":
                    bound.add((alias.asname or alias.name).split(".")[0])
                    if any(_private(part) for part in alias.name.split(".")):
                        found.append(f"line {node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "mitmproxy":
            for alias in node.names:
                bound.add(alias.asname or alias.name)
                if any(_private(part) for part in (node.module or "").split(".")) or _private(alias.name):
                    found.append(f"line {node.lineno}: from {node.module} import {alias.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            root: ast.expr = node
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in bound:
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_forge_proxy_uses_no_private_mitmproxy_name() -> None:
    problems = {str(path.relative_to(PACKAGE)): uses for path in sorted([*PROXY.rglob("*.py"), *ENTRY.rglob("*.py")])
                if (uses := private_mitmproxy_uses(path.read_text()))}
    assert problems == {}


def test_the_check_catches_what_the_addon_once_did() -> None:
    old = ("from mitmproxy.proxy.layers.http import _http1\n"
           "import mitmproxy.proxy.layers.http._http1 as h\n"
           "from mitmproxy import ctx\n"
           "_http1.make_error_response = f\n"
           "ctx.master._shutdown = 1\n"
           "self._ok = 1\n")
    uses = private_mitmproxy_uses(old)
    assert len(uses) == 3 and any("_http1" in u for u in uses) and any("ctx.master._shutdown" in u for u in uses)
