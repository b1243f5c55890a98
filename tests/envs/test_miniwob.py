"""``env=miniwob``: MiniWoB++ pages in a real headless Chromium per rollout, browser tools through the real
``@playwright/mcp`` behind forge's tool server, the page's own reward read by the ``miniwob`` verifier.

Needs ``scripts/setup.sh web`` (Debian's chromium, the PyPI ``miniwob`` pages, ``forge browser install``); each test
that needs a part says which when it is missing.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from forge_cli.browser import cdp, playwright_mcp
from forge_cli.browser.chromium import chromium_path
from forge_cli.browser.tools import BROWSER_TOOLS
from forge_cli.config.compose import compose
from forge_cli.envs import miniwob
from forge_cli.envs.source import TaskSet, load_tasks
from forge_cli.envs.task import Task
from forge_cli.envs.verifier import Score, VerifierError, VerifyContext, run_verifier
from forge_cli.errors import UserError
from forge_cli.tools.server import ToolGrant, ToolServer
from tests.helpers import QuietHandler, serve_http
from tests.requires import requires


def _tasks(*overrides: str, purpose: str = "eval") -> TaskSet:
    return load_tasks(compose(["env=miniwob", *overrides]).experiment.env, purpose=purpose)  # type: ignore[arg-type]


@pytest.fixture
def tool_server() -> Iterator[ToolServer]:
    with ToolServer("127.0.0.1", 0) as server:
        yield server


def _call(grant: ToolGrant, tool: str, **arguments: Any) -> dict[str, Any]:
    answer = httpx.post(f"{grant.url}/tools/{tool}", json=arguments, timeout=90,
                        headers={"Authorization": f"Bearer {grant.key}"})
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


async def _score(task: Task, state: dict[str, Any] | None, tmp_path: Path) -> Score:
    assert task.verifier is not None
    ctx = VerifyContext(sandbox=None, task=task, rollout_id="r", reward_dir="/nowhere",  # type: ignore[arg-type]
                        timeout_s=30, tool_state=state, log_path=tmp_path / "verifier.log")
    return await run_verifier(task.verifier, ctx)


# ---------------------------------------------------------------- tasks
def test_tasks_are_environments_times_seeds_with_splits() -> None:
    requires("web")
    test = _tasks()
    names = {t.metadata["env"] for t in test.tasks}
    assert len(names) >= 100 and "click-button" in names and test.split == "test"
    assert {t.metadata["seed"] for t in test.tasks} == {1000, 1001}
    train = _tasks("env.options.envs=[click-button,click-link]", purpose="train")
    assert [t.id for t in train.tasks][:3] == ["click-button@0", "click-link@0", "click-button@1"]
    assert len(train.tasks) == 8 and train.split == "train"
    task = train.tasks[0]
    assert task.verify and task.verify.startswith("miniwob:") and {t.name for t in task.tools} >= {
        "browser_snapshot", "browser_click", "browser_type"}
    # no tool runs the agent's JavaScript in the page (the reward is a JavaScript variable there)
    assert not {t.name for t in task.tools} & {"browser_evaluate", "browser_run_code_unsafe", "browser_file_upload"}
    assert task.tool_state["browser"]["url"].startswith("file://") and "Math.seedrandom(\"0\")" in \
        task.tool_state["browser"]["setup_js"]


def test_bad_input_is_one_clear_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    requires("web")
    with pytest.raises(UserError, match=r"unknown MiniWoB\+\+ environment.*no-such-task") as raised:
        _tasks("env.options.envs=[click-button,no-such-task]")
    assert raised.value.exit_code == 2 and "click-button" in (raised.value.fix or "")
    with pytest.raises(UserError, match="holds no MiniWoB") as raised:
        _tasks(f"env.path={tmp_path}")
    assert raised.value.exit_code == 2
    monkeypatch.setattr(miniwob, "package_html", lambda: None)
    with pytest.raises(UserError, match="`miniwob` is not installed") as raised:
        _tasks()
    assert raised.value.exit_code == 1 and "setup.sh web" in (raised.value.fix or "")
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(UserError, match=r"none is installed") as raised:
        chromium_path()
    assert raised.value.exit_code == 1 and "apt-get install -y chromium" in (raised.value.fix or "")


def test_a_checkout_directory_is_read_like_the_package(tmp_path: Path) -> None:
    requires("web")
    html = miniwob.package_html()
    assert html is not None
    copy = tmp_path / "miniwob-plusplus" / "miniwob" / "html"
    shutil.copytree(html, copy)
    tasks = _tasks(f"env.path={tmp_path / 'miniwob-plusplus'}", "env.options.envs=[click-button]").tasks
    assert [t.id for t in tasks] == ["click-button@1000", "click-button@1001"]
    assert tasks[0].tool_state["browser"]["url"] == (copy / "miniwob" / "click-button.html").resolve().as_uri()


# ---------------------------------------------------------------- the browser, the tools, the reward
def _click_task() -> tuple[TaskSet, Task]:
    tasks = _tasks("env.options.envs=[click-button]", "env.options.test_seeds=1")
    return tasks, tasks.tasks[0]


def test_a_scripted_policy_reaches_reward_1_on_click_button(tool_server: ToolServer, tmp_path: Path) -> None:
    requires("web")
    tasks, task = _click_task()
    log = tmp_path / "r1" / "tool_calls.jsonl"
    grant = tool_server.register("r1", task.tools, task.tool_state, log)
    instruction = tasks.source.instruction(task, lambda: tool_server.state("r1"))
    wanted = re.match(r'Click on the "(.+)" button\.', instruction)
    assert wanted, instruction
    snapshot = _call(grant, "browser_snapshot")
    assert not snapshot["is_error"] and "Click on the" in snapshot["result"]
    ref = re.search(r'button "' + re.escape(wanted.group(1)) + r'" \[ref=(e\d+)\]', snapshot["result"])
    assert ref, snapshot["result"]
    clicked = _call(grant, "browser_click", target=ref.group(1), element=wanted.group(1))
    # the page's new snapshot comes inline (the server wrote it to a file the agent could not open)
    assert not clicked["is_error"] and "```yaml" in clicked["result"] and "[Snapshot](" not in clicked["result"]
    state = tool_server.state("r1")
    score = asyncio.run(_score(task, state, tmp_path))
    assert (score.reward, score.passed) == (1.0, True) and score.details["utterance"] == instruction.splitlines()[0]
    tool_server.unregister("r1")
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c["tool"] for c in calls] == ["browser_snapshot", "browser_click"]
    assert (tmp_path / "r1" / "browser.log").exists() and (tmp_path / "r1" / "browser-mcp.log").exists()


def test_a_wrong_click_or_none_scores_0(tool_server: ToolServer, tmp_path: Path) -> None:
    requires("web")
    tasks, task = _click_task()
    grant = tool_server.register("wrong", task.tools, task.tool_state, tmp_path / "wrong" / "calls.jsonl")
    tool_server.register("idle", task.tools, task.tool_state, tmp_path / "idle" / "calls.jsonl")
    instruction = tasks.source.instruction(task, lambda: tool_server.state("wrong"))
    wanted = re.match(r'Click on the "(.+)" button\.', instruction)
    assert wanted
    snapshot = _call(grant, "browser_snapshot")["result"]
    other = [m for m in re.finditer(r'button "([^"]+)" \[ref=(e\d+)\]', snapshot) if m.group(1) != wanted.group(1)]
    assert other, snapshot
    _call(grant, "browser_click", target=other[0].group(2))
    wrong = asyncio.run(_score(task, tool_server.state("wrong"), tmp_path))
    idle = asyncio.run(_score(task, tool_server.state("idle"), tmp_path))
    assert (wrong.reward, wrong.passed, wrong.details["done"]) == (0.0, False, True)
    assert (idle.reward, idle.passed, idle.details["done"]) == (0.0, False, False)
    # a page that could not be read is never a 0: the verifier cannot judge (an infra error)
    with pytest.raises(VerifierError, match="could not be read"):
        asyncio.run(_score(task, {"services": {}}, tmp_path))


def test_forbidden_navigation_and_screenshots_over_mcp(tool_server: ToolServer, tmp_path: Path) -> None:
    requires("web")
    _, task = _click_task()
    grant = tool_server.register("mcp", task.tools, task.tool_state, tmp_path / "mcp" / "calls.jsonl")

    async def body() -> dict[str, Any]:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {grant.key}"}) as http, \
                Client(streamable_http_client(grant.mcp_url, http_client=http)) as client:  # type: ignore[arg-type]
            listed = await client.list_tools()
            shot = await client.call_tool("browser_take_screenshot", {})
            script = await client.call_tool("browser_navigate", {"url": "javascript:core.endEpisode(1)"})
            files = await client.call_tool("browser_navigate", {"url": "file:///etc/passwd"})
            return {"tools": [t.name for t in listed.tools], "shot": shot, "script": script, "files": files}

    got = anyio.run(body)
    assert "browser_click" in got["tools"]
    images = [part for part in got["shot"].content if part.type == "image"]
    assert len(images) == 1 and images[0].mime_type == "image/png" and len(images[0].data) > 1000
    assert got["script"].is_error and got["files"].is_error
    state = tool_server.state("mcp")["services"]["browser"]["state"]
    assert state["done"] is False  # the javascript: URL never ran
    logged = [json.loads(line) for line in (tmp_path / "mcp" / "calls.jsonl").read_text().splitlines()]
    assert logged[0]["result"]["images"][0].startswith("image/png")


class _Site(QuietHandler):
    def do_GET(self) -> None:
        self.reply(200, b"<html><body><h1>shop</h1></body></html>", "text/html")


def test_four_rollouts_get_four_browsers_that_share_nothing(tool_server: ToolServer, tmp_path: Path) -> None:
    requires("web")
    site, base = serve_http(_Site)
    url = f"{base}/"
    tools = BROWSER_TOOLS
    try:
        ids = [f"iso-{i}" for i in range(4)]
        state = {"browser": {"url": url, "state_js": "({cookie: document.cookie, stored: localStorage.getItem('k')})"}}

        async def register_all() -> None:
            await asyncio.gather(*(asyncio.to_thread(tool_server.register, rid, tools, state, tmp_path / rid / "c")
                                   for rid in ids))

        asyncio.run(register_all())
        sessions: list[Any] = [tool_server._entries[rid].tools.sessions.get("browser") for rid in ids]
        assert all(s is not None for s in sessions)
        ports = {s.backend.chromium.cdp_port for s in sessions if s and s.backend.chromium}
        assert len(ports) == 4  # four browsers
        first = sessions[0]
        assert first is not None and first.backend.chromium is not None
        cdp.evaluate_sync(first.backend.chromium.cdp_url,
                          "document.cookie = 'session=alice; path=/'; localStorage.setItem('k', 'secret'); 1")
        seen = [tool_server.state(rid)["services"]["browser"]["state"] for rid in ids]
        assert seen[0] == {"cookie": "session=alice", "stored": "secret"}
        assert seen[1:] == [{"cookie": "", "stored": None}] * 3
        profiles = [s.backend.chromium.profile for s in sessions if s and s.backend.chromium]
        for rid in ids:
            tool_server.unregister(rid)
        assert not any(p.exists() for p in profiles)  # profiles deleted with their browsers
    finally:
        site.shutdown()


# ---------------------------------------------------------------- forge eval, the default harness, real vLLM
@pytest.mark.e2e
@pytest.mark.vllm
@pytest.mark.docker
@pytest.mark.mitm
def test_forge_eval_with_react_scores_from_the_pages(tmp_path: Path, policy_server: Any) -> None:
    """The default harness (react, in docker) on three MiniWoB++ tasks, offline: every trial scored by its page (any
    score), none an infra error, each with its browser's logs. In make test-e2e (~80 s with the server's start): make
    test ran past its 40-minute budget on this machine."""
    from tests.eval.test_eval_cli import _eval

    requires("web")
    code, report, stderr = _eval(
        tmp_path, f"proxy.upstream={policy_server.url}", "proxy.port=0", f"run.output_dir={tmp_path / 'runs'}",
        "+env=miniwob", "env.options.envs=[click-button,click-link,focus-text]", "env.options.test_seeds=1",
        'harness.command=[python3,"{{bundle}}/bin/forge-react",--max-steps,"2",--tools,text,"{{instruction}}"]',
        "runtime=docker", "eval.trials=1", "model.max_output_tokens=64")
    assert code == 0, stderr
    run_dir = Path(report["meta"]["run_dir"])
    results = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert sorted(r["task_id"] for r in results) == ["click-button@1000", "click-link@1000", "focus-text@1000"]
    assert all(r["status"] != "infra_error" and r["reward"] is not None for r in results), results
    with sqlite3.connect(run_dir / "traces.sqlite") as db:
        for r in results:
            logs = Path(r["logs"])
            assert (logs / "browser.log").is_file() and (logs / "browser-mcp.log").is_file()
            assert "miniwob: the page's reward" in (logs / "verifier.log").read_text()
            # the model was told the page's own utterance (read when the rollout started), not the placeholder
            utterance = r["verifier"]["details"]["utterance"]
            (first,) = db.execute("SELECT request FROM calls WHERE rollout_id = ? ORDER BY seq LIMIT 1",
                                  (r["rollout_id"],)).fetchone()
            assert json.dumps(utterance)[1:-1] in first and "read when the rollout starts" not in first


def test_doctor_checks_the_browser_of_web_envs(monkeypatch: pytest.MonkeyPatch) -> None:
    from forge_cli.prerequisites import check_browser

    assert check_browser(compose([]).experiment) == []  # builtin: no browser
    monkeypatch.setattr("shutil.which", lambda name: None)
    monkeypatch.setattr(playwright_mcp, "manifest", lambda version=playwright_mcp.VERSION: None)
    chromium, tools = check_browser(compose(["env=miniwob"]).experiment)
    assert not chromium.ok and "apt-get install -y chromium" in chromium.fix
    assert not tools.ok and "forge browser install" in tools.fix


def test_openclaw_can_drive_the_rollouts_browser_with_its_own_tool() -> None:
    """harness.browser=native: OpenClaw's browser tool attached to the rollout's Chromium (its config gets the CDP
    endpoint, JavaScript evaluation off), and forge's browser tools are not offered besides; harnesses without a
    browser tool of their own refuse it (exit 2)."""
    from forge_cli.errors import ConfigError
    from forge_cli.harness.adapter import RolloutContext, ToolsContext, harness_tools, prepare

    requires("web")
    exp = compose(["+harness=openclaw", "env=miniwob", "harness.browser=native"]).experiment
    task = _tasks("env.options.envs=[click-button]").tasks[0]
    given, native = harness_tools(exp.harness, task.tools)
    assert given == () and native
    ctx = RolloutContext(rollout_id="r", proxy_url="http://127.0.0.1:8800", api_key="k", instruction="x",
                         workdir="/work", home="/home/forge", bundle="/opt/forge/harness", tools=None,
                         browser_cdp_url="http://127.0.0.1:40123")
    files = prepare(exp.harness, exp.model, ctx).files
    browser = json.loads(files["/home/forge/.openclaw/openclaw.json"])["browser"]
    assert browser["profiles"]["forge"]["cdpUrl"] == "http://127.0.0.1:40123" and browser["defaultProfile"] == "forge"
    assert browser["evaluateEnabled"] is False and browser["attachOnly"] is True
    run_config = files["/home/forge/.openclaw/forge.json5"]
    assert 'alsoAllow: ["browser"]' in run_config and "mcp:" not in run_config
    default = compose(["+harness=openclaw", "env=miniwob"]).experiment.harness
    assert harness_tools(default, task.tools) == (task.tools, False)  # mcp: forge's tools over MCP
    mcp = prepare(default, exp.model, RolloutContext(
        rollout_id="r", proxy_url="http://127.0.0.1:8800", api_key="k", instruction="x", workdir="/work",
        home="/home/forge", bundle="/b", tools=ToolsContext(task.tools, "http://127.0.0.1:1/r/r", "key")))
    assert list(mcp.files) == ["/home/forge/.openclaw/forge.json5"] and "mcp:" in mcp.files[
        "/home/forge/.openclaw/forge.json5"]
    with pytest.raises(ConfigError, match="no browser tool of its own"):
        compose(["+harness=pi", "harness.browser=native"])
