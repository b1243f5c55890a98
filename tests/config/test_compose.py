"""Composition with Hydra's compose API: group selection, values, user config dirs."""

from __future__ import annotations

from pathlib import Path

import pytest

from forge_cli.config.compose import compose, group_options
from forge_cli.config.schema import GROUPS
from forge_cli.errors import ConfigError


def test_defaults() -> None:
    exp = compose().experiment
    assert (exp.harness.name, exp.env.name, exp.runtime.kind) == ("react", "builtin", "local")
    assert (exp.model.source, exp.trainer.kind, exp.algo.name) == ("smollm2", "local", "grpo")
    assert exp.proxy.host == "127.0.0.1"


@pytest.mark.parametrize("prefix", ["", "+", "++"])
def test_group_selection_with_or_without_plus(prefix: str) -> None:
    exp = compose([f"{prefix}harness=openclaw", f"{prefix}env=osworld"]).experiment
    assert exp.harness.name == "openclaw"
    assert exp.env.name == "osworld"


def test_value_override_and_interpolation() -> None:
    exp = compose(["algo.group_size=8"]).experiment
    assert exp.algo.group_size == 8
    assert exp.rollout.samples_per_task == 8  # follows ${algo.group_size}
    assert compose(["algo=dapo"]).experiment.algo.clip_ratio_high == 0.28


def test_every_shipped_option_validates() -> None:
    options = group_options()
    assert set(options) == set(GROUPS)
    assert set(options["harness"]) >= {"react", "openclaw", "zeroclaw", "codex", "claude-code", "pi", "opencode",
                                       "qwen-code", "gemini-cli", "mini-swe-agent"}
    assert set(options["env"]) == {"builtin", "recovery", "harbor", "claweval", "qwenclawbench", "osworld", "miniwob",
                                   "webvoyager", "mind2web"}
    assert set(options["algo"]) == {"grpo", "dapo", "rloo"}
    assert set(options["runtime"]) == {"local", "docker", "kubernetes"}
    assert set(options["model"]) == {"smollm2-135m", "vllm", "openai-compatible"}
    assert set(options["trainer"]) == {"local", "verl"}
    required = {"vllm": ["model.path=/m"], "openai-compatible": ["model.base_url=http://127.0.0.1:1/v1",
                                                                 "model.model=m"]}
    for group, names in options.items():
        for name in names:
            extra = required.get(name, []) if group == "model" else []
            compose([f"{group}={name}", *extra])


def test_every_option_file_is_documented() -> None:
    """First line: the command that uses it; a comment above every field."""
    for group, names in group_options().items():
        for name, path in names.items():
            lines = path.read_text().splitlines()
            assert lines[0].startswith("# forge "), f"{path}: first line must be the command"
            for i, line in enumerate(lines):
                is_field = line and not line.startswith((" ", "#", "-")) and ":" in line
                if is_field:
                    assert lines[i - 1].startswith("#"), f"{group}/{name}: no comment above '{line}'"


def test_user_config_dir_adds_options(tmp_path: Path) -> None:
    harness = tmp_path / "harness"
    harness.mkdir()
    shipped = group_options()["harness"]["pi"].read_text()
    (harness / "my-pi.yaml").write_text(shipped.replace("name: pi", "name: my-pi"))
    assert "my-pi" in group_options(tmp_path)["harness"]
    assert compose(["+harness=my-pi"], config_dir=tmp_path).experiment.harness.name == "my-pi"


def _problems(overrides: list[str], config_dir: Path | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        compose(overrides, config_dir)
    return info.value.problems


def test_all_errors_reported_at_once() -> None:
    problems = _problems(["algo.group_size=abc", "runtime.resources.memory=lots", "rollout.concurrency=0"])
    text = "\n".join(problems)
    assert "algo.group_size: 'abc'" in text and "valid integer" in text
    assert "runtime.resources.memory: 'lots'" in text and "memory size" in text
    assert "rollout.concurrency: 0" in text and "greater than or equal to 1" in text


def test_unknown_options_near_miss_and_list() -> None:
    problems = _problems(["harness=opnclaw", "env=oswrld"])
    assert len(problems) == 2
    assert "unknown option 'opnclaw'" in problems[0] and "did you mean 'openclaw'" in problems[0]
    assert "available: claude-code, codex" in problems[0]
    assert "did you mean 'osworld'" in problems[1]


def test_unknown_keys_all_at_once() -> None:
    problems = _problems(["algo.group_sise=3", "nope.x=1"])
    assert problems[0].startswith("algo.group_sise: no such setting") and "algo.group_size" in problems[0]
    assert problems[1].startswith("nope.x: no such setting")


def test_missing_required_value() -> None:
    assert _problems(["model=vllm"]) == ["model.path: missing required value (set it with model.path=...)"]


def test_bad_enum_lists_allowed_values() -> None:
    (problem,) = _problems(["runtime=docker", "+runtime.kind=podman"])
    assert "runtime.kind" in problem and "'local'" in problem and "'kubernetes'" in problem


def test_malformed_override() -> None:
    (problem,) = _problems(["algo.group_size=[1,"])
    assert "malformed override" in problem


@pytest.mark.parametrize(("group", "text", "where", "what"), [
    ("harness", "name: broken\npackage: {manager: npm\ncommand: [a]\n", ":3:8: invalid YAML: ",
     "expected ',' or '}', but got ':' (while parsing a flow mapping at line 2, column 10)"),
    ("env", "kind: builtin\n\tpath: x\n", ":2:1: invalid YAML: ", "found character '\\t' that cannot start any token"),
    ("harness", "name: a\nname: b\n", ":2:1: invalid YAML: ", "found duplicate key name"),
], ids=["unclosed-brace", "tab", "duplicate-key"])
def test_invalid_yaml_in_a_group_file_is_one_problem(tmp_path: Path, group: str, text: str, where: str,
                                                       what: str) -> None:
    path = tmp_path / group / "broken.yaml"
    path.parent.mkdir()
    path.write_text(text)
    (problem,) = _problems([f"+{group}=broken"], tmp_path)
    assert problem.startswith(f"{path}{where}") and what in problem


def test_missing_config_dir() -> None:
    assert _problems([], Path("/nonexistent/forge-configs")) == [
        "--config-dir /nonexistent/forge-configs: no such directory"]


def test_proxy_limits_are_validated() -> None:
    exp = compose(["proxy.upstream_timeout_s=30", "proxy.max_header_kb=8"]).experiment
    assert exp.proxy.upstream_timeout_s == 30 and exp.proxy.max_header_kb == 8
    with pytest.raises(ConfigError) as err:
        compose(["proxy.upstream_timeout_s=0", "proxy.max_header_kb=-1"])
    assert "upstream_timeout_s" in str(err.value) and "max_header_kb" in str(err.value)


def test_eval_judge_reaches_the_envs_that_take_a_judge_and_env_options_override_it_key_by_key() -> None:
    from forge_cli.envs.resolve import compose_resolved  # the step above config that knows task sources

    url = "http://127.0.0.1:9/v1"
    qwen = compose_resolved(["env=qwenclawbench", f"eval.judge.base_url={url}", "eval.judge.retries=5"]).experiment
    assert qwen.env.options["judge"]["base_url"] == url and qwen.env.options["judge"]["retries"] == 5
    claw = compose_resolved(["env=claweval", f"eval.judge.base_url={url}", "env.options.judge.model=m",
                             "env.options.judge.retries=2", "eval.judge.retries=7"]).experiment
    assert (claw.env.options["judge"]["base_url"], claw.env.options["judge"]["model"]) == (url, "m")
    assert claw.env.options["judge"]["retries"] == 2, "env.options.judge wins for its env"
    assert compose_resolved(["env=builtin", f"eval.judge.base_url={url}"]).experiment.env.options == {}
    with pytest.raises(ConfigError, match=r"judge\.retries"):
        compose_resolved(["env=claweval", "env.options.judge.retries=0"])
