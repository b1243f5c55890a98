"""``env=miniwob``: MiniWoB++ web tasks in a real browser, scored by the page's own JavaScript, fully offline.

Tasks come from the HTML pages of the PyPI package ``miniwob`` (1.1.0: ~125 environments; ``scripts/setup.sh web``
installs it without its Selenium/gymnasium dependencies, which forge does not use) or from ``env.path``, a
MiniWoB++ checkout's ``miniwob/html`` directory. A task is one environment with one seed: ``click-button@3``.
Splits by seed: ``train`` (seeds 0..train_seeds-1) and ``test`` (seeds 1000..1000+test_seeds-1).

A rollout gets its own Chromium (forge_cli/browser/): forge opens the page, seeds it, starts the episode (its own
time limit a day: the rollout's ends it) and reads the page's utterance ("Click on the OK button"), which becomes the
harness's instruction. The harness acts through the browser tools (``@playwright/mcp``, forwarded by forge's tool
server: MCP for MCP harnesses, the skill file for the others). After the harness exited, the ``miniwob`` verifier
reads the page's raw reward (``WOB_RAW_REWARD_GLOBAL``, before MiniWoB's time decay: a model's think time is not
the task's): reward ``max(0, raw)``, passed when the episode ended with ``raw > 0``.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from forge_cli.browser.prerequisites import check_browser_runtime, ensure_browser
from forge_cli.browser.tools import BROWSER_TOOLS
from forge_cli.envs.source import Log, Purpose, TaskSource
from forge_cli.envs.task import Task
from forge_cli.envs.verifier import Score, Verifier, VerifierError, VerifyContext
from forge_cli.errors import UserError

INSTALL = "scripts/setup.sh web   (pip install --no-deps miniwob==1.1.0, chromium, @playwright/mcp)"
TEST_SEED_BASE = 1000
# an episode's own time limit: a day, so that only the rollout's limit (rollout.timeout_s) ends it; the raw reward
# forge reads does not decay with time
EPISODE_MS = 86_400_000
SPLITS = ("train", "test")
DEFAULT_SPLITS: dict[str, str] = {"eval": "test", "train": "train", "rollout": "test"}
# pages of the package that are not registered environments (deprecated, or never worked headless)
_REGISTERED = re.compile(r'id="miniwob/([a-z0-9-]+)-v1"')

STATE_JS = ("({done: WOB_DONE_GLOBAL, raw_reward: WOB_RAW_REWARD_GLOBAL, reward: WOB_REWARD_GLOBAL, "
            "reason: WOB_REWARD_REASON === null ? null : String(WOB_REWARD_REASON), episode: WOB_EPISODE_ID})")
# harness-neutral: forge's browser tools (browser_snapshot, browser_click, ...) or a harness's own browser tool
INSTRUCTION = ("{utterance}\n\nThis task's web page is open in the browser. Use your browser tools to read the page "
               "(a snapshot lists its elements) and act on it: click, type, select. Stop once the task is done.")


def setup_js(seed: int, episode_ms: int) -> str:
    """Seed the page, start an episode that lasts ``episode_ms``, wait until the task is ready, return the
    utterance (what MiniWoB++'s own Python driver does through Selenium)."""
    return ("(async () => { Math.seedrandom(" + json.dumps(str(seed)) + "); core.EPISODE_MAX_TIME = "
            f"{int(episode_ms)}; core.startEpisodeReal(); "
            "for (let i = 0; i < 200 && !WOB_TASK_READY; i++) await new Promise(r => setTimeout(r, 50)); "
            "return core.getUtterance(); })()")


class MiniwobOptions(BaseModel):
    """``env.options`` of ``env=miniwob``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # only these environments (null: every registered one), e.g. [click-button, click-link]
    envs: list[str] | None = None
    # seeds per environment in the train split (0, 1, ...)
    train_seeds: int = Field(default=4, ge=0, le=1000)
    # seeds per environment in the test split (1000, 1001, ...)
    test_seeds: int = Field(default=2, ge=0, le=1000)


def package_html() -> Path | None:
    """``miniwob/html`` of the installed package, found without importing it (its ``__init__`` needs gymnasium)."""
    spec = importlib.util.find_spec("miniwob")
    for location in (spec.submodule_search_locations or []) if spec else []:
        html = Path(location) / "html"
        if (html / "miniwob").is_dir():
            return html
    return None


class MiniwobSource(TaskSource, name="miniwob"):
    """MiniWoB++ environments and seeds from the installed package (or ``env.path``)."""

    Options: ClassVar[type[BaseModel]] = MiniwobOptions
    # forge doctor checks Chromium and @playwright/mcp for it
    needs_browser: ClassVar[bool] = True

    @cached_property
    def html_dir(self) -> Path:
        if self.env.path:
            root = Path(self.env.path).expanduser()
            for candidate in (root, root / "html", root / "miniwob" / "html"):
                if (candidate / "miniwob").is_dir() and (candidate / "core" / "core.js").is_file():
                    return candidate.resolve()
            raise UserError(f"env.path: {root} holds no MiniWoB++ pages (miniwob/*.html and core/core.js)",
                            fix="give a MiniWoB++ checkout's miniwob/html directory, or unset env.path to use the "
                                "installed package", exit_code=2)
        found = package_html()
        if found is None:
            raise UserError("env=miniwob needs the MiniWoB++ pages: the PyPI package `miniwob` is not installed",
                            fix=INSTALL)
        return found.resolve()

    @cached_property
    def environments(self) -> list[str]:
        """The environments: registered ones whose page exists (every page when the registry is not beside it)."""
        pages = {p.stem for p in (self.html_dir / "miniwob").glob("*.html")}
        registry = self.html_dir.parent / "registration.py"
        if registry.is_file():
            pages &= set(_REGISTERED.findall(registry.read_text()))
        wanted = self.options.envs
        if wanted is not None:
            unknown = sorted(set(wanted) - pages)
            if unknown:
                shown = ", ".join(sorted(pages)[:30]) + (" ..." if len(pages) > 30 else "")
                raise UserError(f"env.options.envs: unknown MiniWoB++ environment(s) {', '.join(unknown)}",
                                fix=f"known: {shown}", exit_code=2)
            return list(dict.fromkeys(wanted))
        return sorted(pages)

    def splits(self) -> list[str]:
        return list(SPLITS)

    def default_split(self, purpose: Purpose) -> str | None:
        return DEFAULT_SPLITS[purpose]

    def load(self, split: str | None) -> list[Task]:
        split = split or "test"
        seeds = range(self.options.train_seeds) if split == "train" else \
            range(TEST_SEED_BASE, TEST_SEED_BASE + self.options.test_seeds)
        return [self._task(name, seed) for seed in seeds for name in self.environments]

    def _task(self, name: str, seed: int) -> Task:
        url = (self.html_dir / "miniwob" / f"{name}.html").as_uri()
        placeholder = INSTRUCTION.format(utterance="(the page's utterance, read when the rollout starts)")
        return Task(id=f"{name}@{seed}", instruction=placeholder,
                    verifier=MiniwobVerifier(), category="miniwob", tools=BROWSER_TOOLS,
                    tool_state={"browser": {"url": url, "setup_js": setup_js(seed, EPISODE_MS), "state_js": STATE_JS}},
                    metadata={"env": name, "seed": seed, "url": url})

    def instruction(self, task: Task, tool_state: Callable[[], dict[str, Any]]) -> str:
        utterance = (((tool_state() or {}).get("services") or {}).get("browser") or {}).get("setup")
        if not isinstance(utterance, str) or not utterance.strip():
            raise RuntimeError(f"the page of {task.id} gave no utterance (see the rollout's browser.log)")
        return INSTRUCTION.format(utterance=utterance.strip())

    def check_runtime(self, runtime_kind: str) -> None:
        check_browser_runtime(self.env.name, runtime_kind)

    def build(self, tasks: list[Task], runtime_kind: str, log: Log) -> None:
        ensure_browser(self.env.name, runtime_kind, log)


class MiniwobVerifier(Verifier, kind="miniwob"):
    """The page's own reward after the harness ended (read over CDP by forge, never by the agent)."""

    def describe(self) -> str:
        return "miniwob: the page's reward (WOB_RAW_REWARD_GLOBAL) read from the rollout's browser"

    async def score(self, ctx: VerifyContext) -> Score:
        page = ((ctx.tool_state or {}).get("services") or {}).get("browser") or {}
        state = page.get("state")
        if not isinstance(state, dict):
            raise VerifierError("the rollout's browser page could not be read (no MiniWoB++ state)")
        ctx.log(f"page {page.get('url')}: {json.dumps(state)}")
        raw = float(state.get("raw_reward") or 0.0)
        done = bool(state.get("done"))
        reward = max(0.0, min(1.0, raw)) if done else 0.0
        return Score(reward=reward, passed=done and raw > 0,
                     details={"done": done, "raw_reward": raw, "reason": state.get("reason"),
                              "utterance": page.get("setup")})
