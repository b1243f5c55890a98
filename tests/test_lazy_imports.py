"""Imports inside functions only where they buy something (issue 35 item 3): outside the CLI (whose commands import
their parts when run, so that ``forge --help`` stays fast: benchmarks/cli_startup.py), a forge module imported
inside a function must bring a heavy or optional dependency with it (torch, transformers, vLLM, peft, docker, the
Kubernetes client, mitmproxy, pyarrow, Hydra, ...: found from the package's import graph, not listed by hand), or
say why on its line (``# lazy: <reason>``). Everything else is imported at the top of its module, where a reader
sees what the module depends on."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import grimp

PACKAGE = Path(__file__).resolve().parents[1] / "forge_cli"
# third-party packages whose import costs start-up time or may be missing where the module runs
HEAVY = frozenset({"torch", "transformers", "vllm", "peft", "docker", "kubernetes", "mitmproxy", "playwright",
                   "pyarrow", "datasets", "hydra", "omegaconf", "tensorboard", "safetensors", "mcp", "jsonschema",
                   "httpx", "yaml", "typer", "rich", "pydantic", "numpy", "grimp", "ray", "verl"})


@cache
def _graph() -> grimp.ImportGraph:
    return grimp.build_graph("forge_cli", include_external_packages=True)


def _brings_heavy(module: str) -> bool:
    graph = _graph()
    if module not in graph.modules:
        return False
    return any(m.split(".")[0] in HEAVY for m in graph.find_upstream_modules(module) | {module})


def _function_imports(path: Path) -> list[tuple[int, str, str]]:
    """(line, module, source line) of each ``from forge_cli... import`` inside a function of ``path``."""
    text = path.read_text()
    lines = text.splitlines()
    seen: set[int] = set()
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for sub in ast.walk(node):
                if isinstance(sub, ast.ImportFrom) and (sub.module or "").startswith("forge_cli") \
                        and sub.lineno not in seen:
                    seen.add(sub.lineno)
                    end = sub.end_lineno or sub.lineno
                    out.append((sub.lineno, str(sub.module), " ".join(lines[sub.lineno - 1:end])))
    return out


def test_function_level_imports_of_forge_modules_say_why() -> None:
    unexplained = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "cli" in path.relative_to(PACKAGE).parts[:1]:
            continue
        for line, module, source in _function_imports(path):
            if "# lazy:" in source or _brings_heavy(module):
                continue
            unexplained.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {module} inside a function")
    assert unexplained == [], "\n".join(unexplained)
