"""Lint: no test skips on its own. What a test needs installed it declares through tests/requires.py, which skips
only where that is honest (a part no `make test` installs, or outside CI) and fails under CI=true; a bare
``pytest.skip`` / ``skipif`` / ``importorskip`` (or unittest's skips) anywhere else under tests/ would let CI go
green without running the test. Also: every part a test names is in tests/requires.py's table."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.requires import part

TESTS = Path(__file__).resolve().parent
HELPER = TESTS / "requires.py"
SKIP_ATTRS = frozenset({"skip", "skipif", "importorskip", "Skipped", "SkipTest", "skipTest", "skipIf",
                        "skipUnless"})
SKIP_MODULES = frozenset({"pytest", "_pytest.outcomes", "_pytest.skipping", "unittest", "unittest.case"})
FIX = ('declare what the test needs instead: requires("part") or @pytest.mark.requires("part") from tests/requires.py '
       '(add the part to its table if it is new)')


def bare_skips(source: str, filename: str = "<test>") -> list[str]:
    """``file:line: what`` for every skip in SOURCE that does not go through tests/requires.py."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Attribute) and node.attr in SKIP_ATTRS:
            found.append(f"{filename}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and node.module in SKIP_MODULES:
            found += [f"{filename}:{node.lineno}: from {node.module} import {alias.name}" for alias in node.names
                      if alias.name in SKIP_ATTRS]
    return found


def named_parts(source: str) -> list[tuple[int, str]]:
    """(line, part) for every string given to requires(...), pytest.mark.requires(...) and module(name, part)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        args = node.args if callee == "requires" else node.args[1:2] if callee == "module" else []
        found += [(node.lineno, a.value) for a in args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    return found


def _sources() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if p != HELPER)


def test_no_bare_skip_outside_tests_requires() -> None:
    found = [hit for path in _sources() for hit in bare_skips(path.read_text(), str(path.relative_to(TESTS.parent)))]
    assert not found, f"bare skips under tests/ ({FIX}):\n" + "\n".join(found)


def test_every_named_part_is_in_the_table() -> None:
    unknown = []
    for path in _sources():
        for line, name in named_parts(path.read_text()):
            try:
                part(name)
            except KeyError as exc:
                unknown.append(f"{path.relative_to(TESTS.parent)}:{line}: {exc}")
    assert not unknown, "\n".join(unknown)


@pytest.mark.parametrize("source", [
    "import pytest\npytest.skip('x')\n",
    "import pytest\n@pytest.mark.skipif(True, reason='x')\ndef test_a(): pass\n",
    "import pytest\n@pytest.mark.skip\ndef test_a(): pass\n",
    "import pytest\ntorch = pytest.importorskip('torch')\n",
    "from pytest import skip\n",
    "import unittest\n@unittest.skipIf(True, 'x')\ndef test_a(): pass\n",
    "import unittest\nclass T(unittest.TestCase):\n    def test_a(self): self.skipTest('x')\n",
    "import pytest\nraise pytest.skip.Exception('x')\n",
])
def test_the_lint_catches_every_form(source: str) -> None:
    assert bare_skips(source), source


def test_the_lint_leaves_requires_and_look_alikes_alone() -> None:
    source = ('from tests.requires import requires\nrequires("vllm")\nargs = ["--skip-trust"]\n'
              '"""a docstring that says pytest.skip"""\nskip = "x"\n')
    assert bare_skips(source) == []
    assert named_parts(source) == [(2, "vllm")]
