"""How each harness gets a task's tools: MCP config (parsed and checked) or a skill file; goldens per harness."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from forge_cli.config.compose import compose, group_options
from forge_cli.envs.task import Task
from forge_cli.harness.adapter import RolloutContext, ToolsContext, prepare
from forge_cli.rollout.plan import build_plan
from tests.golden import check_golden
from tests.helpers import EXAMPLE_TASKS, forge

GOLDEN = Path(__file__).parent / "golden"
HARNESSES = sorted(group_options()["harness"])
URL = "http://127.0.0.1:8900/r/mail-0-abc123"
KEY = "ft-test-key"
MCP = {"claude-code", "codex", "opencode", "qwen-code", "openclaw", "pi", "zeroclaw", "gemini-cli"}


def _prepare(harness: str, task: Task, tools: bool = True) -> tuple[list[str], dict[str, str], dict[str, str]]:
    exp = compose([f"+harness={harness}"]).experiment
    ctx = RolloutContext(rollout_id="mail-0-abc123", proxy_url="http://127.0.0.1:8800", api_key="fk-test-key",
                         instruction=task.instruction, workdir="/work", home="/tmp/forge-home",
                         bundle="/opt/forge/harness", tools=ToolsContext(task.tools, URL, KEY) if tools else None)
    inv = prepare(exp.harness, exp.model, ctx)
    return inv.argv, inv.env, inv.files


@pytest.mark.parametrize("harness", HARNESSES)
def test_tools_render_golden(harness: str, mail_task: Task) -> None:
    argv, env, files = _prepare(harness, mail_task)
    plain_argv, plain_env, plain_files = _prepare(harness, mail_task, tools=False)
    # only what the tools add or replace is shown
    added = {k: v for k, v in env.items() if plain_env.get(k) != v}
    changed = {p: c for p, c in files.items() if plain_files.get(p) != c}
    parts = [f"# argv\n{json.dumps(argv, indent=1)}", f"# env added\n{json.dumps(added, indent=1)}"]
    parts += [f"# file {path}\n{content}" for path, content in changed.items()]
    check_golden(GOLDEN / f"{harness}.txt", "\n".join(parts) + "\n")
    assert "{{" not in json.dumps([argv, env, files])
    # nothing tool-related for a task without tools
    assert "8900" not in json.dumps([plain_argv, plain_env, plain_files])


def _mcp_entry(harness: str, argv: list[str], env: dict[str, str], files: dict[str, str]) -> dict[str, object]:
    """The forge MCP server entry exactly as the harness will read it."""
    home = "/tmp/forge-home"
    if harness == "claude-code":
        path = argv[argv.index("--mcp-config") + 1]
        assert argv[1:4] == ["--strict-mcp-config", "--mcp-config", path] and argv[4] == "-p"
        return json.loads(files[path])["mcpServers"]["forge"]
    if harness == "codex":
        overrides = dict(a.split("=", 1) for a in argv[argv.index("-c"):argv.index("exec")] if a != "-c")
        entry = tomllib.loads("\n".join(f"{k.split('.')[-1]} = {v}" for k, v in overrides.items()))
        assert all(k.startswith("mcp_servers.forge.") for k in overrides)
        assert env[entry["bearer_token_env_var"]] == KEY
        return entry
    if harness == "opencode":
        return json.loads(files[env["OPENCODE_CONFIG"]])["mcp"]["forge"]
    if harness == "qwen-code":
        settings = json.loads(files[f"{home}/.qwen/settings.json"])
        assert settings["memory"]["enableManagedAutoMemory"] is False
        return settings["mcpServers"]["forge"]
    if harness == "pi":
        return json.loads(files[f"{home}/.pi/agent/mcp.json"])["mcpServers"]["forge"]
    if harness == "gemini-cli":
        settings = json.loads(files[f"{home}/.gemini/settings.json"])
        assert settings["security"]["auth"]["selectedType"] == "gemini-api-key"
        entry = settings["mcpServers"]["forge"]
        assert entry["type"] == "http" and entry["trust"] is True
        return dict(entry)
    if harness == "openclaw":
        text = files[f"{home}/.openclaw/forge.json5"]
        assert 'mcp: {' in text and f'url: "{URL}/mcp"' in text and f'Bearer {KEY}' in text
        assert 'transport: "streamable-http"' in text and 'primary: "rl/policy"' in text
        return {"url": f"{URL}/mcp"}
    if harness == "zeroclaw":  # the server its agent's mcp_bundles grant (schema: tests/harness/test_zeroclaw.py)
        config = tomllib.loads(files[f"{home}/.zeroclaw/config.toml"])
        (bundle,) = config["agents"]["rl"]["mcp_bundles"]
        (entry,) = [s for s in config["mcp"]["servers"] if s["name"] in config["mcp_bundles"][bundle]["servers"]]
        assert entry["name"] == "forge" and entry["transport"] == "http"
        return dict(entry)
    raise AssertionError(harness)


@pytest.mark.parametrize("harness", HARNESSES)
def test_mcp_harnesses_get_the_server_others_a_skill(harness: str, mail_task: Task) -> None:
    argv, env, files = _prepare(harness, mail_task)
    exp = compose([f"+harness={harness}"]).experiment
    assert (exp.harness.tools.via == "mcp") == (harness in MCP)
    if harness in MCP:
        entry = _mcp_entry(harness, argv, env, files)
        assert (entry.get("url") or entry.get("httpUrl")) == f"{URL}/mcp"
        headers = entry.get("headers")
        assert headers is None or headers == {"Authorization": f"Bearer {KEY}"}
        assert not any(p.endswith("SKILL.md") for p in files)
        assert argv[-1].endswith(mail_task.instruction)
        return
    skill = files["/tmp/forge-home/forge-tools/SKILL.md"]
    assert skill.startswith("---\nname: forge-task-tools\ndescription: ")
    for tool in mail_task.tools:
        assert f"## {tool.name}" in skill and f"{URL}/tools/{tool.name}" in skill
        assert json.dumps(tool.input_schema, indent=2) in skill
    assert f"Authorization: Bearer {KEY}" in skill and "curl -s -X POST" in skill
    assert f"URL = {URL!r}" in files["/tmp/forge-home/forge-tools/call.py"]
    instruction = next(a for a in argv if mail_task.instruction in a)
    assert instruction.endswith("described in /tmp/forge-home/forge-tools/SKILL.md.")


def test_skill_caller_reaches_the_rest_face(mail_task: Task, tool_server: object, tmp_path: Path) -> None:
    """call.py, as a harness without MCP runs it, calls the tool server and gets the result."""
    import subprocess
    import sys

    from forge_cli.tools.server import ToolServer
    from forge_cli.tools.skill import skill_files

    assert isinstance(tool_server, ToolServer)
    grant = tool_server.register("r-skill", mail_task.tools, mail_task.tool_state, tmp_path / "calls.jsonl")
    for path, content in skill_files(mail_task.tools, grant.url, grant.key, str(tmp_path / "skill")).items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(content)
    done = subprocess.run([sys.executable, str(tmp_path / "skill" / "call.py"), "read_email", '{"id": "2"}'],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"]["body"] == "FYI the design review is in room 4B."
    assert tool_server.summary("r-skill")["by_tool"] == {"read_email": 1}


def test_dry_run_shows_the_tool_server_and_rendered_config(mail_task: Task) -> None:
    plan = build_plan(compose(["+harness=claude-code", f"env.path={EXAMPLE_TASKS}", "env.task_ids=[mail-reply]",
                               "tools.port=8900"]).experiment)
    (first, *_) = plan.rollouts
    assert first.tools is not None and first.tools["via"] == "mcp"
    assert first.tools["endpoint"] == f"http://127.0.0.1:8900/r/{first.rollout_id}/mcp"
    assert first.tools["tools"] == ["list_inbox", "read_email", "send_email"]
    assert "ft-****masked****" in first.config_files["$SANDBOX/home/.forge/mcp.json"]
    result = forge("rollout", "--dry-run", f"env.path={EXAMPLE_TASKS}", "env.task_ids=[mail-reply]",
                   "rollout.samples_per_task=1")
    assert result.returncode == 0, result.stderr
    assert "task tools: list_inbox, read_email, send_email as a skill file" in result.stdout
    assert "http://127.0.0.1:$TOOLS_PORT/r/" in result.stdout and "SKILL.md" in result.stdout
    plain = build_plan(compose([f"env.path={EXAMPLE_TASKS}", "env.task_ids=[hello-file]"]).experiment)
    assert plain.rollouts[0].tools is None


def test_bad_tool_spec_is_one_clear_error(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text("- id: t\n  instruction: x\n  tools:\n    - name: 9bad\n      description: d\n"
                     "      input_schema: {type: string}\n      backend: {kind: ftp}\n")
    result = forge("rollout", "--dry-run", f"env.path={tasks}")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "invalid tool spec" in result.stderr and "tools.0.name" in result.stderr
