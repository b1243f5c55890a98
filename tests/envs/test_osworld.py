"""env=osworld without a desktop: task loading (shipped tasks, a checkout, left-out tasks with why), the plan a dry
run shows, the verifier, and the bad-input paths. The desktop runs are in test_osworld_desktop.py (make test-e2e)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from forge_cli.config.compose import compose
from forge_cli.desktop.actions import DESKTOP_TOOLS
from forge_cli.envs.osworld import OSWorldSource, OSWorldVerifier
from forge_cli.envs.osworld.needs import download_cache_name
from forge_cli.envs.source import TaskSet, load_tasks
from forge_cli.envs.task import Task
from forge_cli.envs.verifier import Score, VerifierError, VerifyContext
from forge_cli.errors import UserError
from tests.helpers import forge
from tests.requires import requires

DRIVE = "https://drive.google.com/uc?id=forge-test&export=download"


def _tasks(*overrides: str) -> TaskSet:
    return load_tasks(compose(["+env=osworld", *overrides]).experiment.env, purpose="eval")


def _checkout(root: Path) -> Path:
    """A small OSWorld-format checkout written here: a runnable task, one needing a file from Google Drive, one
    needing VS Code, listed in two split files."""
    tasks: dict[str, dict[str, Any]] = {
        "os": {"id": "t-runs", "instruction": "Say hi.", "config": [],
               "evaluator": {"func": "exact_match", "result": {"type": "vm_command_line", "command": ["echo", "hi"]},
                             "expected": {"type": "rule", "rules": {"expected": "hi\n"}}}},
        "libreoffice_calc": {"id": "t-drive", "instruction": "Fix the sheet.",
                             "config": [{"type": "download", "parameters": {"files": [
                                 {"url": DRIVE, "path": "/home/user/a.xlsx"}]}}],
                             "evaluator": {"func": "exact_match", "result": {"type": "vm_file",
                                           "path": "/home/user/a.xlsx", "dest": "a.xlsx"},
                                           "expected": {"type": "rule", "rules": {"expected": "x"}}}},
        "vs_code": {"id": "t-code", "instruction": "Open a folder.", "related_apps": ["vscode"],
                    "config": [{"type": "launch", "parameters": {"command": ["code"]}}],
                    "evaluator": {"func": "exact_match", "result": {"type": "vm_command_line", "command": ["true"]},
                                  "expected": {"type": "rule", "rules": {"expected": ""}}}},
    }
    base = root / "evaluation_examples"
    for domain, task in tasks.items():
        (base / "examples" / domain).mkdir(parents=True)
        (base / "examples" / domain / f"{task['id']}.json").write_text(json.dumps(task))
    (base / "test_all.json").write_text(json.dumps({d: [t["id"]] for d, t in tasks.items()}))
    (base / "test_small.json").write_text(json.dumps({"os": ["t-runs"]}))
    return root


def test_the_shipped_tasks_load_with_desktop_tools_and_their_options() -> None:
    tasks = _tasks("env.options.observation=screenshot_a11y_tree", "env.options.a11y_max_tokens=700")
    assert tasks.split == "test_all" and len(tasks.tasks) == 3
    assert isinstance(tasks.source, OSWorldSource) and tasks.source.splits() == ["test_all", "test_small"]
    for task in tasks.tasks:
        assert task.tools == DESKTOP_TOOLS and task.verifier is not None
        desktop = task.tool_state["desktop"]
        assert desktop["observation"] == "screenshot_a11y_tree" and desktop["a11y_max_tokens"] == 700
        assert desktop["image"] == "forge-desktop:bookworm" and desktop["task"]["id"] == task.id
        assert "computer_screenshot shows the screen" in task.instruction and "computer_done" in task.instruction
    assert {t.category for t in tasks.tasks} == {"os", "libreoffice_calc", "chrome"}


def test_a_checkout_leaves_out_what_cannot_run_here_with_why(tmp_path: Path) -> None:
    root = _checkout(tmp_path / "OSWorld")
    cache = tmp_path / "cache"
    tasks = _tasks(f"env.path={root}", f"env.options.cache_dir={cache}")
    assert [t.id for t in tasks.tasks] == ["t-runs"]
    left = tasks.source.left_out  # type: ignore[attr-defined]
    assert set(left) == {"t-drive", "t-code"}
    assert left["t-drive"].startswith("file:") and DRIVE in left["t-drive"]
    assert "VS Code" in left["t-code"]
    assert "2 of the split left out" in tasks.note
    # a file fetched into the cache (OSWorld's own cache layout) makes its task runnable offline
    (cache / "t-drive").mkdir(parents=True)
    (cache / "t-drive" / download_cache_name(DRIVE, "/home/user/a.xlsx")).write_bytes(b"sheet")
    assert {t.id for t in _tasks(f"env.path={root}", f"env.options.cache_dir={cache}").tasks} == {"t-runs", "t-drive"}
    # with the network allowed, it is runnable without the cache
    assert "t-drive" in {t.id for t in _tasks(f"env.path={root}", "env.options.network=true").tasks}
    assert [t.id for t in _tasks(f"env.path={root}", "env.split=test_small").tasks] == ["t-runs"]


def test_bad_input_is_one_clear_message_exit_2(tmp_path: Path) -> None:
    root = _checkout(tmp_path / "OSWorld")
    cases = [
        ([f"env.path={tmp_path / 'nowhere'}"], "is not an OSWorld checkout"),
        ([f"env.path={root}", "env.task_ids=[t-code]"], "t-code: app:"),
        ([f"env.path={root}", "env.split=test_nope"], "unknown split"),
        ([f"env.path={root}", "env.split=test_small", "env.task_ids=[t-drive]"], "unknown task id"),
    ]
    for overrides, needle in cases:
        with pytest.raises(UserError) as raised:
            _tasks(*overrides)
        assert raised.value.exit_code == 2 and needle in raised.value.message, (overrides, raised.value.message)
    (root / "evaluation_examples" / "test_code.json").write_text(json.dumps({"vs_code": ["t-code"]}))
    with pytest.raises(UserError, match=r"has no tasks in split 'test_code' \(all 1 left out: t-code: app:"):
        _tasks(f"env.path={root}", "env.split=test_code")


def test_forge_osworld_tasks_lists_each_left_out_task(tmp_path: Path) -> None:
    root = _checkout(tmp_path / "OSWorld")
    result = forge("osworld", "tasks", f"env.path={root}", f"env.options.cache_dir={tmp_path / 'c'}", "--json")
    assert result.returncode == 0, result.stderr
    listing = json.loads(result.stdout)
    assert listing["runnable"] == ["t-runs"] and set(listing["left_out"]) == {"t-drive", "t-code"}
    text = forge("osworld", "tasks", f"env.path={root}", f"env.options.cache_dir={tmp_path / 'c'}")
    assert "1 runnable, 2 left out" in text.stdout and "skip  t-code: app:" in text.stdout


def test_the_dry_run_shows_the_desktop_the_tools_and_the_observation_mode() -> None:
    result = forge("rollout", "--dry-run", "+harness=openclaw", "+env=osworld", "model.auto_context=true",
                   "env.options.observation=screenshot")
    assert result.returncode == 0, result.stderr
    out = " ".join(result.stdout.split())
    assert "desktop: its own container from forge-desktop:bookworm" in out and "observation screenshot" in out
    assert "computer_click" in out and "over MCP" in out and "osworld: OSWorld's evaluator" in out
    with pytest.raises(UserError) as raised:  # the desktops run on forge's own daemon: no Kubernetes plan
        _tasks().source.check_runtime("kubernetes")
    assert raised.value.exit_code == 2 and "runtime=docker" in (raised.value.fix or "")


def test_what_is_missing_on_the_machine_is_exit_1_with_the_command(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from forge_cli.desktop import container

    source = _tasks().source
    monkeypatch.setenv("FORGE_HOME", str(tmp_path / "home"))  # no OSWorld environment there
    with pytest.raises(UserError) as raised:
        source.build([], "docker", print)
    assert raised.value.exit_code == 1 and raised.value.fix == "scripts/setup.sh osworld"
    monkeypatch.setattr("forge_cli.desktop.osworld_env.osworld_python", lambda: Path("/usr/bin/python3"))
    monkeypatch.setattr(container, "has_image", lambda image: False)
    with pytest.raises(UserError) as raised:
        source.build([], "docker", print)
    assert raised.value.exit_code == 1 and raised.value.fix == "forge image build --builtin desktop"


async def _score(state: dict[str, Any], tmp_path: Path) -> Score:
    verifier = OSWorldVerifier(func="exact_match")
    ctx = VerifyContext(sandbox=None, task=Task(id="t", instruction="x", verifier=verifier),  # type: ignore[arg-type]
                        rollout_id="r", reward_dir="/nowhere", timeout_s=5, tool_state=state,
                        log_path=tmp_path / "verifier.log")
    return await verifier.score(ctx)


def test_the_verifier_reads_osworlds_score_and_never_turns_an_error_into_0(tmp_path: Path) -> None:
    full = asyncio.run(_score({"services": {"desktop": {"score": 1.0, "last_action": "DONE", "steps": 3}}}, tmp_path))
    assert (full.reward, full.passed, full.details["last_action"]) == (1.0, True, "DONE")
    part = asyncio.run(_score({"services": {"desktop": {"score": 0.5}}}, tmp_path))
    assert (part.reward, part.passed) == (0.5, False)
    with pytest.raises(VerifierError, match="unreachable"):
        asyncio.run(_score({"services": {"desktop": {"score": None, "error": "the desktop is unreachable"}}}, tmp_path))
    with pytest.raises(VerifierError, match="no desktop state"):
        asyncio.run(_score({"services": {}}, tmp_path))
    assert "desktop" in (tmp_path / "verifier.log").read_text()


def test_forge_osworld_fetch_fills_the_cache_then_the_task_runs_offline(tmp_path: Path) -> None:
    """`forge osworld fetch` against a loopback server standing in for the file hosts, then `forge osworld tasks`
    offline: the task is runnable from the cache."""
    from tests.helpers import QuietHandler, serve_http

    requires("osworld")

    class Files(QuietHandler):
        def do_GET(self) -> None:
            self.reply(200, b"sheet bytes", "application/octet-stream")

    server, url = serve_http(Files)
    try:
        root = _checkout(tmp_path / "OSWorld")
        drive = root / "evaluation_examples" / "examples" / "libreoffice_calc" / "t-drive.json"
        task = json.loads(drive.read_text())
        task["config"][0]["parameters"]["files"][0]["url"] = f"{url}/uc?id=forge-test&export=download"
        drive.write_text(json.dumps(task))
        cache = tmp_path / "cache"
        before = forge("osworld", "tasks", f"env.path={root}", f"env.options.cache_dir={cache}", "--json")
        assert "t-drive" in json.loads(before.stdout)["left_out"]
        fetched = forge("osworld", "fetch", f"env.path={root}", f"env.options.cache_dir={cache}")
        assert fetched.returncode == 0, fetched.stderr
        assert "t-drive: fetched" in fetched.stdout and "Traceback" not in fetched.stderr
    finally:
        server.shutdown()
    after = forge("osworld", "tasks", f"env.path={root}", f"env.options.cache_dir={cache}", "--json")
    assert json.loads(after.stdout)["runnable"] == ["t-runs", "t-drive"]
