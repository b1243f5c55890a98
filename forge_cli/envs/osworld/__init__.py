"""``env=osworld``: OSWorld's desktop tasks in a ``forge-desktop`` container per rollout, scored by OSWorld's code.

Tasks come from an OSWorld checkout (``env.path``: its ``evaluation_examples/<split>.json`` and
``examples/<domain>/<id>.json``; any split file, the Verified revisions included) or, with ``env.path`` unset, from
forge's own three tasks in the same format (``tasks/``: no network needed). Each rollout gets its own desktop
(forge_cli/desktop/: Xvfb, the apps, forge's clean-room server for OSWorld's in-VM HTTP contract), set up before the
harness starts by OSWorld's own ``desktop_env`` code (``DesktopEnv.reset``) and scored after it by the same code
(``DesktopEnv.evaluate``: the task's getters and metrics), run in OSWorld's environment (``scripts/setup.sh
osworld``) with a forge provider. The harness acts through forge's computer-use tools (MCP, or the skill file).

Tasks forge cannot run are left out with the reason, never scored 0 (``forge osworld tasks`` lists them): files
that are neither in ``env.options.cache_dir`` (``forge osworld fetch`` fills it on a machine with network) nor
allowed from the network (``env.options.network``), apps the container lacks (VS Code), GNOME-only setups, logins.
"""

from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from forge_cli.desktop import osworld_env
from forge_cli.desktop.actions import DESKTOP_TOOLS
from forge_cli.envs.osworld.needs import unmet_needs
from forge_cli.envs.source import Log, Purpose, TaskSource
from forge_cli.envs.task import Task
from forge_cli.envs.verifier import Score, Verifier, VerifierError, VerifyContext
from forge_cli.errors import UserError

SHIPPED = Path(__file__).resolve().parent / "tasks"
DEFAULT_SPLIT = "test_all"
INSTRUCTION = (
    "{instruction}\n\nYou are working on a Linux desktop ({width}x{height} pixels) through the computer_* tools. "
    "{observe} Act with computer_click, computer_type, computer_key, computer_hotkey, computer_scroll, computer_drag "
    "(coordinates are screen pixels, origin top left); each action answers with {after}. When the task is done, "
    "call computer_done; if it cannot be done, call computer_fail. Then stop.")
_OBSERVE = {
    "a11y_tree": "computer_accessibility_tree lists the screen's elements with their positions and sizes (click an "
                 "element's centre).",
    "screenshot": "computer_screenshot shows the screen.",
    "screenshot_a11y_tree": "computer_screenshot shows the screen; computer_accessibility_tree lists its elements "
                            "with positions and sizes.",
}
_AFTER = {"a11y_tree": "the accessibility tree after it", "screenshot": "a screenshot after it",
          "screenshot_a11y_tree": "a screenshot and the accessibility tree after it"}


class OSWorldOptions(BaseModel):
    """``env.options`` of ``env=osworld``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # what the agent observes: OSWorld's names (a11y_tree: text only, for text models)
    observation: Literal["a11y_tree", "screenshot", "screenshot_a11y_tree"] = "a11y_tree"
    # the accessibility tree's text is cut at about this many tokens (4 characters each)
    a11y_max_tokens: int = Field(default=2000, ge=100, le=200_000)
    # task files fetched before (forge osworld fetch), in OSWorld's cache layout (null: $FORGE_HOME/osworld-cache)
    cache_dir: str | None = None
    # whether tasks may download their files from the network at setup (false: only cached files; the others are
    # left out with the reason)
    network: bool = False
    # the desktop image (forge image build --builtin desktop)
    desktop_image: str = "forge-desktop:bookworm"
    # the desktop's screen
    screen_width: int = Field(default=1920, ge=640, le=7680)
    screen_height: int = Field(default=1080, ge=480, le=4320)
    # seconds an action is given to take effect before the screen is observed
    settle_s: float = Field(default=1.0, ge=0, le=30)
    # time limits of OSWorld's setup of a task and of its scoring, in seconds
    setup_timeout_s: int = Field(default=900, ge=10)


class OSWorldSource(TaskSource, name="osworld"):
    """OSWorld tasks from a checkout (``env.path``) or forge's own (``tasks/``)."""

    Options: ClassVar[type[BaseModel]] = OSWorldOptions

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        # task id -> why forge leaves it out (filled by load)
        self.left_out: dict[str, str] = {}

    @cached_property
    def root(self) -> Path:
        """The checkout's ``evaluation_examples`` directory."""
        if not self.env.path:
            return SHIPPED / "evaluation_examples"
        base = Path(self.env.path).expanduser()
        for candidate in (base / "evaluation_examples", base):
            if (candidate / "examples").is_dir():
                return candidate.resolve()
        raise UserError(f"env.path: {base} is not an OSWorld checkout (no evaluation_examples/examples/)",
                        fix="give the directory of a clone of github.com/xlang-ai/OSWorld, or unset env.path for "
                            "forge's own desktop tasks", exit_code=2)

    def splits(self) -> list[str]:
        return sorted(p.stem for p in self.root.glob("*.json") if _is_split(p))

    def default_split(self, purpose: Purpose) -> str | None:
        splits = self.splits()
        return DEFAULT_SPLIT if DEFAULT_SPLIT in splits else (splits[0] if splits else None)

    def load(self, split: str | None) -> list[Task]:

        split = split or self.default_split("eval")
        if split is None:
            raise UserError(f"env.path: {self.root} has no split file (e.g. test_all.json)", exit_code=2)
        try:
            listing = json.loads((self.root / f"{split}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise UserError(f"env.split: {self.root / (split + '.json')} cannot be read: {exc}", exit_code=2) from None
        cache_dir = self.cache_dir
        tasks, self.left_out = [], {}
        seen: set[str] = set()
        for domain, ids in listing.items():
            for task_id in ids:
                if task_id in seen:  # OSWorld's test_all.json lists a few tasks twice
                    continue
                seen.add(task_id)
                path = self.root / "examples" / domain / f"{task_id}.json"
                try:
                    raw = json.loads(path.read_text(encoding="utf-8"))
                except (OSError, ValueError) as exc:
                    self.left_out[str(task_id)] = f"its task file {path} cannot be read: {exc}"
                    continue
                reasons = unmet_needs(raw, cache_dir, network=self.options.network)
                if reasons:
                    self.left_out[str(task_id)] = "; ".join(reasons)
                    continue
                tasks.append(self._task(raw, domain))
        wanted = [i for i in self.env.task_ids or [] if i in self.left_out]
        if wanted:
            raise UserError("env.task_ids: " + "; ".join(f"{i}: {self.left_out[i]}" for i in wanted),
                            fix="forge osworld fetch fills the cache on a machine with network", exit_code=2)
        return tasks

    @property
    def cache_dir(self) -> Path:

        return Path(self.options.cache_dir).expanduser() if self.options.cache_dir else osworld_env.default_cache_dir()

    def _task(self, raw: dict[str, Any], domain: str) -> Task:
        o = self.options
        desktop = {"task": raw, "image": o.desktop_image, "observation": o.observation,
                   "a11y_max_tokens": o.a11y_max_tokens, "cache_dir": str(self.cache_dir),
                   "screen": [o.screen_width, o.screen_height], "settle_s": o.settle_s,
                   "setup_timeout_s": o.setup_timeout_s, "eval_timeout_s": self.env.verifier_timeout_s}
        instruction = INSTRUCTION.format(instruction=str(raw.get("instruction") or "").strip(), width=o.screen_width,
                                         height=o.screen_height, observe=_OBSERVE[o.observation],
                                         after=_AFTER[o.observation])
        evaluator = raw.get("evaluator") or {}
        return Task(id=str(raw["id"]), instruction=instruction, verifier=OSWorldVerifier(func=_func(evaluator)),
                    category=domain, tools=DESKTOP_TOOLS, tool_state={"desktop": desktop},
                    metadata={"osworld": {"domain": domain, "snapshot": raw.get("snapshot"),
                                          "related_apps": raw.get("related_apps") or []}})

    def check_runtime(self, runtime_kind: str) -> None:
        if runtime_kind == "kubernetes":
            raise UserError(f"env={self.env.name} runs each rollout's desktop as a container on forge's own docker "
                            "daemon, which a Kubernetes run does not have yet",
                            fix="use runtime=docker or runtime=local", exit_code=2)

    def build(self, tasks: list[Task], runtime_kind: str, log: Log) -> None:
        """The desktop image and OSWorld's environment must be there (exit 1 with the command that makes them)."""
        from forge_cli.desktop.container import BUILD_COMMAND, DesktopError, has_image

        self.check_runtime(runtime_kind)
        osworld_env.osworld_python()
        try:
            present = has_image(self.options.desktop_image)
        except DesktopError as exc:
            raise UserError(str(exc), fix="scripts/dockerd.sh", exit_code=1) from None
        if not present:
            raise UserError(f"the desktop image {self.options.desktop_image} is not built", fix=BUILD_COMMAND,
                            exit_code=1)


def _is_split(path: Path) -> bool:
    """A split file maps domains to lists of task ids."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and all(isinstance(v, list) for v in data.values())


def _func(evaluator: dict[str, Any]) -> str:
    func = evaluator.get("func")
    return ",".join(map(str, func)) if isinstance(func, list) else str(func or "?")


class OSWorldVerifier(Verifier, kind="osworld"):
    """OSWorld's own evaluator (getters and metrics of desktop_env) on the desktop's final state."""

    def __init__(self, func: str = "?") -> None:
        self.func = func

    def describe(self) -> str:
        return f"osworld: OSWorld's evaluator ({self.func}) on the desktop's final state (desktop_env.evaluate)"

    async def score(self, ctx: VerifyContext) -> Score:
        desktop = ((ctx.tool_state or {}).get("services") or {}).get("desktop") or {}
        ctx.log(f"desktop: {json.dumps({k: v for k, v in desktop.items() if k != 'screenshots'})}")
        if desktop.get("score") is None:
            raise VerifierError(f"OSWorld's evaluator gave no score: {desktop.get('error') or 'no desktop state'}")
        score = float(desktop["score"])
        return Score(reward=max(0.0, min(1.0, score)), passed=score >= 1.0,
                     details={"score": score, "last_action": desktop.get("last_action"), "steps": desktop.get("steps"),
                              "func": self.func, "screenshots": len(desktop.get("screenshots") or [])})
