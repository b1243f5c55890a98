"""One rollout's desktop session: the container, OSWorld's task setup, the agent's computer-use calls, the score.

What a task asks for (its ``tool_state.desktop``):

- ``task``: the OSWorld task (its JSON: ``id``, ``instruction``, ``config``, ``evaluator``), set up by OSWorld's own
  ``desktop_env`` code before the harness starts and scored by it after the harness ended;
- ``image``: the desktop image (default ``forge-desktop:bookworm``);
- ``observation``: what an action answers with, OSWorld's names: ``a11y_tree`` (the pruned accessibility tree as
  text), ``screenshot`` (an image) or ``screenshot_a11y_tree`` (both);
- ``a11y_max_tokens``: the cap of the tree's text (so that a text-only model's context holds it);
- ``cache_dir``: task files fetched before (``forge osworld fetch``), OSWorld's cache layout;
- ``screen``: ``[width, height]``; ``settle_s``: seconds an action is given before the observation is taken;
- ``setup_timeout_s`` / ``eval_timeout_s``; ``run_id`` (the container's ``forge.run`` label; default: the run
  whose ``rollouts/`` directory holds the rollout's logs).

Files per rollout (``<run dir>/rollouts/<id>/``): ``desktop/step-NNN.png`` (the screen after each action, and the
first and last), ``desktop/trajectory.jsonl`` (each action as the pyautogui code OSWorld records, or
WAIT/DONE/FAIL), ``desktop/setup.log`` and ``desktop/evaluate.log`` (OSWorld's own logging), ``desktop.log`` (the
container's output). Every tool call is also in ``tool_calls.jsonl``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from forge_cli.desktop import a11y
from forge_cli.desktop.actions import record, to_pyautogui
from forge_cli.desktop.container import DEFAULT_IMAGE, DesktopContainer, DesktopError
from forge_cli.desktop.osworld_env import run_host

OBSERVATIONS = ("a11y_tree", "screenshot", "screenshot_a11y_tree")
# what OSWorld's PythonController puts before an action's code
PRELUDE = "import pyautogui; import time; pyautogui.FAILSAFE = False; "
OBSERVE_TIMEOUT_S = 60.0
ACTION_TIMEOUT_S = 90.0
_OBSERVATION_TOOLS = {"computer_screenshot", "computer_accessibility_tree"}


@dataclass(frozen=True)
class DesktopAnswer:
    """A computer-use tool's answer: its text, images (media type, base64) and whether it is an error."""

    text: str
    images: tuple[tuple[str, str], ...] = ()
    is_error: bool = False


@dataclass
class DesktopSession:
    """The desktop of one rollout; ``start()`` before the harness runs, ``close()`` after it is verified."""

    setup: dict[str, Any]
    log_dir: Path | None
    rollout_id: str = "rollout"
    container: DesktopContainer | None = None
    client: httpx.AsyncClient | None = None
    screenshots: list[str] = field(default_factory=list)
    steps: int = 0
    last_action: str = "NONE"
    setup_seconds: float | None = None
    _result: dict[str, Any] | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def directory(self) -> Path:
        base = self.log_dir if self.log_dir is not None else Path(tempfile.gettempdir())
        return base / "desktop"

    @property
    def observation(self) -> str:
        mode = str(self.setup.get("observation") or "a11y_tree")
        return mode if mode in OBSERVATIONS else "a11y_tree"

    @property
    def task(self) -> dict[str, Any]:
        task = self.setup.get("task")
        if not isinstance(task, dict):
            raise DesktopError("the task's tool_state.desktop has no OSWorld task")
        return task

    async def start(self) -> None:
        """Container, OSWorld's setup of the task, the first screenshot; DesktopError (an infra error) on failure."""
        task = self.task
        self.directory.mkdir(parents=True, exist_ok=True)
        screen = tuple(self.setup.get("screen") or (1920, 1080))
        self.container = await DesktopContainer.start(str(self.setup.get("image") or DEFAULT_IMAGE), self.rollout_id,
                                                      self.setup.get("run_id") or self._run_id(), self.log_dir,
                                                      screen=(int(screen[0]), int(screen[1])))
        self.client = httpx.AsyncClient(base_url=self.container.server_url, timeout=OBSERVE_TIMEOUT_S)
        if task.get("config"):
            started = time.monotonic()
            outcome = await self._host("setup", float(self.setup.get("setup_timeout_s") or 900))
            self.setup_seconds = round(time.monotonic() - started, 3)
            if not outcome.get("ok"):
                raise DesktopError(f"OSWorld's setup of task {task.get('id')} failed: {outcome.get('error')} "
                                   f"(see {self.directory / 'setup.log'})")
        await self._keep_screenshot()

    def _run_id(self) -> str | None:
        """The run of a rollout logged in ``<run dir>/rollouts/<id>/`` (forge rollout, eval and train)."""
        if self.log_dir is not None and self.log_dir.parent.name == "rollouts":
            return self.log_dir.parent.parent.name
        return None

    async def _host(self, command: str, timeout_s: float, *extra: str) -> dict[str, Any]:
        assert self.container is not None
        ports = [self.container.port(p) for p in (5000, 9222, 8080)]
        return await run_host(command, self.task, ports, self.setup.get("cache_dir"),
                              self.directory / f"{command}.log", timeout_s, *extra)

    async def call(self, name: str, arguments: dict[str, Any]) -> DesktopAnswer:
        """One computer-use call of the agent (one at a time per rollout: a desktop has one mouse)."""
        if self.client is None:
            return DesktopAnswer("the desktop is not running", is_error=True)
        async with self._lock:
            try:
                return await self._call(name, arguments)
            except httpx.HTTPError as exc:
                return DesktopAnswer(f"the desktop did not answer: {type(exc).__name__}: {exc}", is_error=True)

    async def _call(self, name: str, arguments: dict[str, Any]) -> DesktopAnswer:
        if name == "computer_screenshot":
            return await self._observe("screenshot", "the screen now")
        if name == "computer_accessibility_tree":
            return await self._observe("a11y_tree", "the screen now")
        try:
            code = to_pyautogui(name, arguments)
        except ValueError as exc:
            return DesktopAnswer(str(exc), is_error=True)
        self.steps += 1
        self._trajectory(name, arguments)
        if name in ("computer_done", "computer_fail"):
            self.last_action = "DONE" if name == "computer_done" else "FAIL"
            return DesktopAnswer(f"recorded {self.last_action}: the task ends when you stop")
        if name == "computer_wait":
            await asyncio.sleep(float(arguments.get("seconds", 2)))
        elif code is not None:
            assert self.client is not None
            response = await self.client.post("/execute", json={"command": ["python3", "-c", PRELUDE + code],
                                                               "shell": False}, timeout=ACTION_TIMEOUT_S)
            body = _json(response)
            if response.status_code != 200 or body.get("returncode") not in (0, None):
                error = str(body.get("error") or body.get("message") or response.text)[-600:]
                return DesktopAnswer(f"{name} failed: {error}", is_error=True)
        self.last_action = "ACTION"
        await asyncio.sleep(float(self.setup.get("settle_s", 1.0)))
        await self._keep_screenshot()
        return await self._observe(self.observation, f"{name}: done", saved=True)

    async def _observe(self, mode: str, headline: str, saved: bool = False) -> DesktopAnswer:
        text = [headline]
        images: list[tuple[str, str]] = []
        if "screenshot" in mode:
            png = self._last_png() if saved else None
            if png is None:
                png = await self._screenshot()
            images.append(("image/png", base64.b64encode(png).decode()))
        if "a11y_tree" in mode:
            text.append(await self.accessibility_text())
        return DesktopAnswer("\n".join(text), tuple(images))

    async def accessibility_text(self) -> str:
        assert self.client is not None
        response = await self.client.get("/accessibility")
        body = _json(response)
        if response.status_code != 200 or not isinstance(body.get("AT"), str):
            return f"(no accessibility tree: {str(body.get('error') or response.text)[:300]})"
        try:
            return a11y.render_tree(body["AT"], int(self.setup.get("a11y_max_tokens") or 2000))
        except ValueError as exc:  # a tree the server could not write whole
            return f"(the accessibility tree could not be read: {exc})"

    async def _screenshot(self) -> bytes:
        assert self.client is not None
        response = await self.client.get("/screenshot")
        if response.status_code != 200 or not response.content.startswith(b"\x89PNG"):
            raise httpx.HTTPError(f"no screenshot (HTTP {response.status_code}: {response.text[:200]})")
        return response.content

    def _last_png(self) -> bytes | None:
        return Path(self.screenshots[-1]).read_bytes() if self.screenshots else None

    async def _keep_screenshot(self) -> None:
        try:
            png = await self._screenshot()
        except httpx.HTTPError:  # the next one shows the screen; the trajectory notes the gap by its numbering
            return
        path = self.directory / f"step-{len(self.screenshots):03d}.png"
        path.write_bytes(png)
        self.screenshots.append(str(path))

    def _trajectory(self, name: str, arguments: dict[str, Any]) -> None:
        entry = {"step": self.steps, "time": round(time.time(), 3), "tool": name, "arguments": arguments,
                 "action": record(name, arguments)}
        with (self.directory / "trajectory.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")

    async def state(self) -> dict[str, Any]:
        """What the verifier reads: OSWorld's score of the desktop's final state (computed once, on first ask)."""
        if self._result is None:
            self._result = await self._evaluate()
        return {**self._result, "last_action": self.last_action, "steps": self.steps,
                "screenshots": list(self.screenshots), "setup_seconds": self.setup_seconds}

    async def _evaluate(self) -> dict[str, Any]:
        if self.container is None:
            return {"score": None, "error": "the desktop is not running"}
        await self._keep_screenshot()
        last = self.last_action if self.last_action in ("DONE", "FAIL") else "NONE"
        outcome = await self._host("evaluate", float(self.setup.get("eval_timeout_s") or 600), "--last-action", last)
        if not outcome.get("ok"):
            return {"score": None, "error": f"{outcome.get('error')} (see {self.directory / 'evaluate.log'})"}
        return {"score": float(outcome.get("score") or 0.0), "error": None, "seconds": outcome.get("seconds")}

    async def close(self) -> None:
        if self.client is not None:
            await self.client.aclose()
            self.client = None
        if self.container is not None:
            await self.container.stop(self.log_dir)
            self.container = None


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
