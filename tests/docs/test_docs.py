"""The documentation: the README stays short and keeps its two commands, every page is in the site's nav and under
~25 KB, the options reference equals what the config schema generates, and the worked examples of "Extending forge"
run. ``mkdocs build --strict`` itself (broken links, missing pages, bad anchors) runs in ``make test``."""

from __future__ import annotations

import asyncio
import re
import sys
import types
from pathlib import Path
from typing import Any

import yaml

from forge_cli.config import reference
from forge_cli.config.compose import compose
from forge_cli.envs.source import load_tasks
from forge_cli.envs.verifier import Score

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def _nav_pages(entry: Any) -> list[str]:
    if isinstance(entry, str):
        return [entry]
    if isinstance(entry, list):
        return [p for item in entry for p in _nav_pages(item)]
    if isinstance(entry, dict):
        return [p for value in entry.values() for p in _nav_pages(value)]
    return []


def _python_blocks(page: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", (DOCS / page).read_text(), flags=re.M | re.S)


def _module(name: str, code: str) -> types.ModuleType:
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(code, f"<docs {name}>", "exec"), module.__dict__)
    return module


def test_readme_is_short_and_keeps_the_two_commands() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.encode()) <= 12 * 1024
    makefile = (REPO / "Makefile").read_text()
    for target in ("run", "test"):
        assert re.search(rf"^make {target}\s+#", readme, flags=re.M), f"make {target} is not in the README"
        assert re.search(rf"^{target}:", makefile, flags=re.M), f"the Makefile has no {target} target"
    assert "exec make test" in (REPO / ".ci" / "run").read_text()


def test_every_page_is_in_the_nav_and_small() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    nav = set(_nav_pages(config["nav"]))
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert pages - nav == set(), "pages missing from mkdocs.yml's nav"
    assert nav - pages == set(), "nav entries without a page"
    big = {p: (DOCS / p).stat().st_size for p in pages if (DOCS / p).stat().st_size > 25 * 1024}
    assert big == {}


def test_readme_links_to_existing_pages() -> None:
    links = re.findall(r"\]\((docs/[^)#]+)", (REPO / "README.md").read_text())
    assert links
    assert [link for link in links if not (REPO / link).is_file()] == []


def test_options_reference_is_generated_from_the_schema() -> None:
    directory = DOCS / "reference" / "options"
    pages = reference.render()
    assert {p.name for p in directory.glob("*.md")} == set(pages)
    stale = [name for name, text in pages.items() if (directory / name).read_text() != text]
    assert stale == [], "run `make docs` (python -m forge_cli.config.reference) and commit docs/reference/options/"


def test_options_reference_covers_every_field() -> None:
    text = "".join(reference.render().values())
    for key in ("rollout.sampling.temperature", "trainer.lora.rank", "runtime.proxy_replicas", "eval.judge.base_url",
                "env.services[].scope", "model.context_extension", "algo.dynamic_sampling"):
        assert f"`{key}`" in text
    # a field's comment in the schema reaches its row
    assert "drop the whole group of a rollout that ended infra_error" in text


def test_task_source_example_loads_tasks() -> None:
    (code,) = _python_blocks("extending/task-source.md")
    _module("docs_example_arith", code)
    try:
        exp = compose(["env.source=docs_example_arith:ArithSource", "env.options.count=3"]).experiment
        train = load_tasks(exp.env, purpose="train")
        test = load_tasks(exp.env, purpose="eval")
    finally:
        del sys.modules["docs_example_arith"]
        from forge_cli.envs.source import SOURCES

        for name in [k for k, cls in SOURCES.items() if cls.__module__ == "docs_example_arith"]:
            del SOURCES[name]  # the example's own source: the conformance suite checks every registered one
    assert (train.split, test.split) == ("train", "test")
    assert [t.id for t in train.tasks] == ["arith-train-0", "arith-train-1", "arith-train-2"]
    assert train.tasks[1].instruction == "Write the value of 1 + 3 into answer.txt." and train.tasks[1].verifier


def test_verifier_examples_score() -> None:
    function, klass = _python_blocks("extending/verifier.md")
    checks = _module("docs_example_checks", function + "\n" + klass)

    class Ctx:
        async def read_text(self, path: str) -> str | None:
            return {"poem.txt": " ".join(["w"] * 17)}.get(path)

    try:
        got = asyncio.run(checks.word_count(Ctx(), path="poem.txt", words=17))
        missing = asyncio.run(checks.word_count(Ctx(), path="none.txt", words=17))
        from forge_cli.envs.verifier import parse_verifier

        verifier = parse_verifier({"kind": "docs_example_checks:ExitZero", "command": "true"}, "test")
    finally:
        del sys.modules["docs_example_checks"]
        from forge_cli.envs.verifier import VERIFIERS

        for kind in [k for k, cls in VERIFIERS.items() if cls.__module__ == "docs_example_checks"]:
            VERIFIERS.remove(kind)  # the example's own kinds: the conformance suite checks every registered one
    assert isinstance(got, Score) and got.passed and got.reward == 1.0
    assert not missing.passed and missing.reward == 0.0
    assert verifier is not None and verifier.describe() == "exit-zero: true"


def test_builtin_image_example_passes_the_kit() -> None:
    example, check = _python_blocks("extending/builtin-image.md")
    _module("docs_example_jq", example)
    try:
        from forge_cli.testing.builtin_image import check_builtin_image

        assert check_builtin_image("docs_example_jq:JqImage") == []
        assert "assert check_builtin_image(" in check
    finally:
        del sys.modules["docs_example_jq"]
        from forge_cli.runtime.images import BUILTIN_IMAGES

        BUILTIN_IMAGES.remove("jq")  # the example's own image: the kit's tests list the registered ones
