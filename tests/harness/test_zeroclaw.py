"""ZeroClaw: the rendered config against ZeroClaw's own serde schema, its CLI grammar, and the
user-provided binary (its releases are out of reach here, and no package registry carries it).

Schema and CLI facts come from zeroclaw-labs/zeroclaw at tag v0.8.4 (commit
a56c345d51dd8ab562e9351e0d4ab83f6a741db9): crates/zeroclaw-config/src/schema.rs (``Config`` :78,
``ModelProviderConfig`` :771, ``CustomModelProviderConfig`` :3185, ``AliasedAgentConfig`` :3540,
``RiskProfileConfig`` :11772, ``RuntimeProfileConfig`` :11895, ``McpServerConfig`` :4943, ``McpConfig`` :4989,
``McpBundleConfig`` :12056),
crates/zeroclaw-config/src/migration.rs:9,42 (schema_version 3; none means v1), src/main.rs:629
(``zeroclaw agent -a <alias> -m <message>``), crates/zeroclaw-config/src/policy.rs:310 (default
forbidden paths include /tmp), docs/book/src/providers/custom.md. See ``zeroclaw_schema.py``.

The stand-in binary is a shell script that answers ``--version`` like clap, rejects argv the real
CLI would reject, and otherwise prints its argv, working directory and the config.toml it finds.
"""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path

import pytest
from pydantic import ValidationError

from forge_cli.config.compose import compose
from forge_cli.envs.source import load_tasks
from forge_cli.harness.adapter import RolloutContext, ToolsContext, prepare
from tests.harness.zeroclaw_schema import ZeroClawConfig, check_references, mcp_servers_for_agent, parse_agent_argv
from tests.helpers import EXAMPLE_TASKS, forge

CONFIG = "/tmp/forge-home/.zeroclaw/config.toml"
TRICKY = '-v "quoted" and $HOME, `ticks`\nsecond line'
TOOLS_URL = "http://127.0.0.1:8900/r/task-0-abc123"

# clap's `zeroclaw agent` as far as forge uses it: --version, `agent -a ALIAS` with `-m TEXT` or
# `--message=TEXT`; anything else fails as clap does (exit 2). Then prints what it was given as JSON.
STAND_IN = r'''#!/bin/sh
if [ "$1" = --version ]; then echo "zeroclaw 0.8.4"; exit 0; fi
if [ "$1" != agent ]; then echo "error: unrecognized subcommand '$1'" >&2; exit 2; fi
dir="${ZEROCLAW_CONFIG_DIR:-$HOME/.zeroclaw}"
[ -f "$dir/config.toml" ] || { echo "no config at $dir/config.toml" >&2; exit 1; }
exec python3 - "$dir/config.toml" "$@" <<'EOF'
import json, os, sys
config, argv = sys.argv[1], sys.argv[2:]
print(json.dumps({"argv": argv, "cwd": os.getcwd(), "config_path": config, "config": open(config).read(),
                  "env": {k: v for k, v in os.environ.items() if k.startswith("ZEROCLAW") or k == "HOME"}}))
EOF
'''


def render(instruction: str = "Create hello.txt", tools: bool = False) -> tuple[list[str], dict[str, str], str]:
    """argv, env and config.toml of one rollout with the shipped zeroclaw.yaml (``tools``: for builtin's
    mail-reply task, whose three mailbox tools come from forge's tool server)."""
    exp = compose(["+harness=zeroclaw"]).experiment
    task_tools = None
    if tools:
        (task,) = load_tasks(compose([f"env.path={EXAMPLE_TASKS}", "env.task_ids=[mail-reply]"]).experiment.env).tasks
        assert task.tools
        task_tools = ToolsContext(task.tools, TOOLS_URL, "ft-test-key")
    ctx = RolloutContext(rollout_id="task-0-abc123", proxy_url="http://127.0.0.1:8800", api_key="fk-test-key",
                         instruction=instruction, workdir="/work", home="/tmp/forge-home",
                         bundle="/opt/forge/harness", tools=task_tools)
    inv = prepare(exp.harness, exp.model, ctx)
    assert list(inv.files) == [CONFIG]
    return inv.argv, inv.env, inv.files[CONFIG]


@pytest.mark.parametrize("tools", [False, True], ids=["no-tools", "task-tools"])
def test_rendered_config_matches_zeroclaw_schema(tools: bool) -> None:
    argv, env, text = render(tools=tools)
    config = ZeroClawConfig.model_validate(tomllib.loads(text))
    options = parse_agent_argv(argv[1:])
    agent = options.get("-a") or options["--agent"]
    assert check_references(config, agent) == []
    provider = config.providers.models.custom[config.agents[agent].model_provider.split(".", 1)[1]]
    assert provider.uri == "http://127.0.0.1:8800/r/task-0-abc123/v1"  # the client appends /chat/completions
    assert provider.api_key == "fk-test-key" and provider.model == "policy"
    assert provider.wire_api == "chat_completions"
    exp = compose(["+harness=zeroclaw"]).experiment
    assert provider.context_window == exp.model.max_model_len and provider.max_tokens == exp.model.max_output_tokens
    profile = config.risk_profiles[config.agents[agent].risk_profile]
    # non-interactive: nothing may wait for an approval, and local sandboxes live under /tmp (forbidden by default)
    assert profile.level == "full" and profile.forbidden_paths == [] and "*" in profile.allowed_commands
    assert not profile.block_high_risk_commands and not profile.require_approval_for_medium_risk
    assert config.runtime_profiles[config.agents[agent].runtime_profile].max_actions_per_hour >= 10_000
    assert config.agents[agent].workspace.path == "/work"
    assert env["ZEROCLAW_CONFIG_DIR"] == str(Path(CONFIG).parent)
    granted = mcp_servers_for_agent(config, agent)
    if not tools:  # nothing MCP-related for a task without tools
        assert granted == [] and config.mcp.servers == [] and config.mcp_bundles == {}
        assert config.agents[agent].mcp_bundles == []
        return
    # the agent gets exactly forge's server: Streamable HTTP ("http") at this rollout's endpoint, with its key
    assert [(s.name, s.transport, s.url, s.headers) for s in granted] == [
        ("forge", "http", f"{TOOLS_URL}/mcp", {"Authorization": "Bearer ft-test-key"})]
    assert config.mcp.enabled and not config.mcp.deferred_loading
    # no skill file either (render() checks config.toml is the only file) and no skill hint in the instruction
    assert argv[-1] == "--message=Create hello.txt"


def test_task_tools_config_is_the_plain_config_plus_the_mcp_server() -> None:
    """The two templates in zeroclaw.yaml differ only by the MCP server, its bundle and the agent's grant."""
    plain = tomllib.loads(render()[2])
    with_tools = tomllib.loads(render(tools=True)[2])
    assert with_tools["agents"]["rl"].pop("mcp_bundles") == ["forge"]
    assert set(with_tools.pop("mcp")) == {"servers"} and with_tools.pop("mcp_bundles") == {
        "forge": {"servers": ["forge"]}}
    assert with_tools == plain


def test_mcp_checks_catch_what_zeroclaw_would_refuse_or_not_grant() -> None:
    base = ('schema_version = 3\n[providers.models.custom.rl]\nuri = "http://x/v1"\n[risk_profiles.rl]\n'
            '[agents.rl]\nmodel_provider = "custom.rl"\nrisk_profile = "rl"\n')
    no_url = ZeroClawConfig.model_validate(tomllib.loads(
        base + 'mcp_bundles = ["b"]\n[[mcp.servers]]\nname = "forge"\ntransport = "http"\n'
        '[mcp_bundles.b]\nservers = ["forge"]\n'))
    assert check_references(no_url, "rl") == ["mcp.servers[0] with transport=http requires url"]
    # a server with no bundle, or a bundle the agent does not name, grants nothing (ZeroClaw only warns)
    ungranted = ZeroClawConfig.model_validate(tomllib.loads(
        base + '[[mcp.servers]]\nname = "forge"\ntransport = "http"\nurl = "http://t/mcp"\n'
        '[mcp_bundles.b]\nservers = ["forge"]\n'))
    assert check_references(ungranted, "rl") == [] and mcp_servers_for_agent(ungranted, "rl") == []
    with pytest.raises(ValidationError, match="transport"):  # McpTransport is lowercase stdio | http | sse
        ZeroClawConfig.model_validate(tomllib.loads(
            base + '[[mcp.servers]]\nname = "forge"\ntransport = "streamable-http"\nurl = "http://t/mcp"\n'))


def test_instruction_reaches_clap_as_one_value() -> None:
    argv, _, _ = render(TRICKY)
    assert argv[0] == "zeroclaw"
    options = parse_agent_argv(argv[1:])
    assert (options.get("-m") or options.get("--message")) == TRICKY
    with pytest.raises(ValueError, match="value is required"):  # why --message=: clap takes "-v …" for a flag
        parse_agent_argv(["agent", "-a", "rl", "-m", TRICKY])


@pytest.mark.parametrize(("toml_text", "error"), [
    # the template forge shipped before this check: `autonomy` is no AliasedAgentConfig field
    ('schema_version = 3\n[providers.models.custom.rl]\nuri = "http://x/v1"\n[agents.rl]\n'
     'model_provider = "custom.rl"\nrisk_profile = "full"\nautonomy = "full"\n', "autonomy"),
    # without schema_version ZeroClaw migrates the file as a v1 config
    ('[providers.models.custom.rl]\nuri = "http://x/v1"\n', "schema_version"),
    ('schema_version = 3\n[providers.models.custom.rl]\nmodel = "m"\n', "uri"),
    ('schema_version = 3\n[risk_profiles.rl]\nlevel = "read_only"\n', "level"),
    ('schema_version = 3\n[providers.models.custom.rl]\nuri = "http://x/v1"\nmax_tokens = "512"\n', "max_tokens"),
])
def test_schema_rejects_what_zeroclaw_would_not_read(toml_text: str, error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        ZeroClawConfig.model_validate(tomllib.loads(toml_text))


def test_dangling_references_are_reported() -> None:
    config = ZeroClawConfig.model_validate(tomllib.loads(
        'schema_version = 3\n[providers.models.custom.rl]\nuri = "http://x/v1"\n'
        '[agents.rl]\nmodel_provider = "custom.rl"\nrisk_profile = "full"\n'))
    assert check_references(config, "rl") == ["agents.rl.risk_profile: risk_profiles.full is not configured"]
    assert "not configured" in check_references(config, "other")[0]


def _stand_in(tmp_path: Path) -> Path:
    program = tmp_path / "downloads" / "zeroclaw"
    program.parent.mkdir(parents=True, exist_ok=True)
    program.write_text(STAND_IN)
    program.chmod(0o755)
    return program


def _install(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return forge("harness", "install", "zeroclaw", *args, env={"FORGE_HOME": str(home)}, timeout=300)


def test_install_from_binary_and_run_as_a_rollout_would(tmp_path: Path) -> None:
    home = tmp_path / "forge-home"
    result = _install(home, "--binary", str(_stand_in(tmp_path)), "--json")
    assert result.returncode == 0, result.stderr
    (manifest,) = json.loads(result.stdout)
    assert manifest["version_output"] == "--version: zeroclaw 0.8.4"
    bundle = home / "harnesses" / "zeroclaw"
    assert manifest["key_files"]["lib/zeroclaw"] and (bundle / "bin" / "zeroclaw").is_file()

    # one rollout's invocation, with this machine's paths for the sandbox's
    exp = compose(["+harness=zeroclaw"]).experiment
    work, sandbox_home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    inv = prepare(exp.harness, exp.model, RolloutContext(
        rollout_id="r-1", proxy_url="http://127.0.0.1:9", api_key="fk-1", instruction=TRICKY,
        workdir=str(work), home=str(sandbox_home), bundle=str(bundle)))
    for path, content in inv.files.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(content)
    proc = subprocess.run(inv.argv, env=inv.env, cwd=work, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    options = parse_agent_argv(seen["argv"])
    assert (options.get("-m") or options.get("--message")) == TRICKY
    assert seen["cwd"] == str(work) and seen["env"]["HOME"] == str(sandbox_home)
    config = ZeroClawConfig.model_validate(tomllib.loads(seen["config"]))
    assert check_references(config, options.get("-a") or options["--agent"]) == []
    assert config.providers.models.custom["rl"].uri == "http://127.0.0.1:9/r/r-1/v1"
    assert config.agents["rl"].workspace.path == str(work)


def test_install_refuses_bad_binary_paths(tmp_path: Path) -> None:
    home = tmp_path / "forge-home"
    missing = _install(home)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert "--binary PATH" in missing.stderr and "harness.binary_path=PATH" in missing.stderr
    nowhere = _install(home, "--binary", str(tmp_path / "nope"))
    assert nowhere.returncode == 2 and "does not exist" in nowhere.stderr and "Traceback" not in nowhere.stderr
    plain = tmp_path / "plain"
    plain.write_text("not a program\n")
    plain.chmod(0o644)
    not_exec = _install(home, "--binary", str(plain))
    assert not_exec.returncode == 2 and "is not executable" in not_exec.stderr
    assert f"chmod +x {plain}" in not_exec.stderr
    directory = _install(home, "--binary", str(tmp_path))
    assert directory.returncode == 2 and "is not a file" in directory.stderr
    assert not (home / "harnesses" / "zeroclaw").exists(), "a refused install leaves nothing behind"


def test_another_binary_replaces_the_installed_one(tmp_path: Path) -> None:
    home = tmp_path / "forge-home"
    program = _stand_in(tmp_path)
    assert _install(home, "--binary", str(program)).returncode == 0
    again = _install(home, "--binary", str(program), "--json")
    assert json.loads(again.stdout)[0].get("already_installed") is True
    program.write_text(STAND_IN.replace("zeroclaw 0.8.4", "zeroclaw 0.8.5"))
    newer = _install(home, "--binary", str(program), "--json")
    (manifest,) = json.loads(newer.stdout)
    assert not manifest.get("already_installed") and manifest["version_output"] == "--version: zeroclaw 0.8.5"


def test_rollout_without_a_binary_says_how_to_provide_it(tmp_path: Path) -> None:
    env = {"FORGE_HOME": str(tmp_path / "forge-home"), "FORGE_SANDBOX_DIR": str(tmp_path / "sbx")}
    result = forge("rollout", "+harness=zeroclaw", f"run.output_dir={tmp_path / 'runs'}", env=env)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "forge harness install zeroclaw --binary PATH" in result.stderr
    assert "harness.binary_path=PATH" in result.stderr
    doctor = forge("doctor", "+harness=zeroclaw", env=env)
    assert "forge harness install zeroclaw --binary PATH" in doctor.stdout + doctor.stderr


def test_rollout_with_binary_path_installs_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``harness.binary_path`` alone is enough: the run installs the bundle before anything starts."""
    from forge_cli.rollout.session import ensure_bundle

    monkeypatch.setenv("FORGE_HOME", str(tmp_path / "forge-home"))
    program = _stand_in(tmp_path)
    ensure_bundle(compose(["+harness=zeroclaw", f"harness.binary_path={program}"]).experiment)
    assert (tmp_path / "forge-home" / "harnesses" / "zeroclaw" / "bin" / "zeroclaw").is_file()
