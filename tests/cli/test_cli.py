"""The CLI as a user meets it: help texts, clear errors with exit 2, lazy imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import forge


def _all_commands() -> list[list[str]]:
    """Every command and sub-command of the real CLI."""
    import typer.main

    from forge_cli.cli.app import app

    found: list[list[str]] = []

    def walk(group: Any, prefix: list[str]) -> None:
        for name, command in group.commands.items():
            found.append([*prefix, name])
            if hasattr(command, "commands"):
                walk(command, [*prefix, name])

    walk(typer.main.get_command(app), [])
    return found


COMMANDS = _all_commands()


def test_root_help_lists_commands() -> None:
    result = forge("--help")
    assert result.returncode == 0
    for name in ("config", "doctor", "rollout", "serve", "model", "proxy", "traces", "harness", "sandbox"):
        assert name in result.stdout


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_each_command_explains_itself(command: list[str]) -> None:
    result = forge(*command, "--help")
    assert result.returncode == 0, result.stderr
    assert "Usage:" in result.stdout and len(result.stdout.splitlines()) > 5


def test_help_does_not_import_heavy_modules() -> None:
    code = ("import sys, forge_cli.cli.app; heavy = {'torch', 'transformers', 'vllm', 'docker', 'kubernetes', "
            "'hydra', 'omegaconf', 'pyarrow', 'httpx'} & set(sys.modules); print(sorted(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


BAD_INPUT = [
    (["harness=opnclaw"], "did you mean 'openclaw'"),
    (["algo.group_size=abc"], "algo.group_size: 'abc' is not allowed"),
    (["model=vllm"], "model.path: missing required value"),
    (["algo.group_size=[1,"], "malformed override"),
    (["--config-dir", "/nonexistent/dir"], "no such directory"),
    (["runtime.resources.memory=12zb"], "not a memory size"),
]


@pytest.mark.parametrize(("args", "message"), BAD_INPUT, ids=[a[0][0] for a in BAD_INPUT])
@pytest.mark.parametrize("command", [["config", "show"], ["rollout", "--dry-run"], ["doctor"]], ids=" ".join)
def test_bad_input_one_clear_message(command: list[str], args: list[str], message: str) -> None:
    result = forge(*command, *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stderr.startswith("error: invalid experiment")


@pytest.mark.parametrize("command", [["config", "show"], ["rollout", "--dry-run"], ["doctor"]], ids=" ".join)
def test_invalid_yaml_under_config_dir_one_clear_message(command: list[str], tmp_path: Path) -> None:
    broken = tmp_path / "harness" / "broken.yaml"
    broken.parent.mkdir()
    broken.write_text("name: broken\npackage: {manager: npm\ncommand: [a]\n")
    result = forge(*command, "--config-dir", str(tmp_path), "+harness=broken")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stderr.startswith("error: invalid experiment")
    assert f"{broken}:3:8: invalid YAML: expected ',' or '}}'" in result.stderr


def test_config_show_prints_composed_yaml() -> None:
    result = forge("config", "show", "+harness=codex", "algo.group_size=6", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["harness"]["name"] == "codex" and data["algo"]["group_size"] == 6
    assert data["rollout"]["samples_per_task"] == 6


def test_config_groups_describes_every_option() -> None:
    data = json.loads(forge("config", "groups", "--json").stdout)
    assert all(text for options in data.values() for text in options.values())
    assert "openclaw" in data["harness"]


def test_doctor_reports_each_prerequisite() -> None:
    result = forge("doctor", "runtime=kubernetes", "runtime.context=no-such-context", "+harness=openclaw", "--json",
                   env={"KUBECONFIG": "/nonexistent/kubeconfig", "FORGE_HOME": "/nonexistent/forge-home"})
    assert result.returncode == 1
    checks = {c["name"]: c for c in json.loads(result.stdout)}
    assert not checks["kube context"]["ok"] and checks["kube context"]["fix"]
    assert not checks["harness bundle openclaw"]["ok"]
    assert checks["harness bundle openclaw"]["fix"] == "forge harness install openclaw"
    assert not checks["vLLM environment"]["ok"] and checks["vLLM environment"]["fix"] == "scripts/setup.sh vllm"
    assert not checks["mitmdump"]["ok"]
