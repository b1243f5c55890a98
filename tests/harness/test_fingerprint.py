"""The harness drift guard (issue 36 item 4): the fingerprint of a canary rollout's requests
(`forge_cli/harness/fingerprint.py`), the diff that names what changed (`fingerprint_diff.py`), and `forge harness
fingerprint | check` live: a fake script harness whose tool schema changes between two versions fails the check
naming the parameter; react twice gives the same fingerprint; pi matches its committed fingerprint."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from forge_cli.harness.fingerprint import VARIES, fingerprint, normalise, system_text, tools
from forge_cli.harness.fingerprint_diff import diff, fingerprint_path, read_fingerprint, version_drift
from forge_cli.paths import forge_home
from forge_cli.traces.record import CallRecord
from tests.helpers import REPO, forge

BASH = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}


def _tool(name: str, schema: dict[str, Any], description: str = "run it") -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": schema}}


def _chat(seq: int, messages: list[dict[str, Any]], *, tool_list: list[dict[str, Any]] | None = None,
          rollout: str = "r-abc123", **fields: Any) -> CallRecord:
    body = {"model": "policy", "messages": messages, "tools": tool_list if tool_list is not None else
            [_tool("bash", BASH)], "temperature": 0.7, **fields}
    return CallRecord(rollout_id=rollout, seq=seq, wire_format="chat", status="ok", path="/v1/chat/completions",
                      stream=True, request=body)


SYSTEM = {"role": "system", "content": "You are an agent. Workdir /work. Today is 2026-12-07. Session "
                                       "0b7f7c1e-2a3b-4c5d-8e9f-0a1b2c3d4e5f."}
USER = {"role": "user", "content": "Append a line to readme.txt."}
CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"echo x\"}"}}]}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "ok"}


def _rollout(rollout: str = "r-abc123", date: str = "2026-12-07", **fields: Any) -> list[CallRecord]:
    system = {"role": "system", "content": SYSTEM["content"].replace("2026-12-07", date)}
    return [_chat(0, [system, USER], rollout=rollout, **fields),
            _chat(1, [system, USER, CALL, RESULT], rollout=rollout, **fields),
            # a side call: a title, no tools, its own system prompt
            _chat(2, [{"role": "system", "content": "Write a title."}, USER], tool_list=[], rollout=rollout,
                  max_tokens=20)]


def _fp(records: list[CallRecord], version: str = "1.0") -> dict[str, Any]:
    return fingerprint(records, harness="fake", version=version)


def test_fingerprint_of_hand_made_records() -> None:
    fp = _fp(_rollout())
    assert fp["calls"] == 3 and list(fp["roles"]) == ["main", "side-1"]
    main, side = fp["roles"]["main"], fp["roles"]["side-1"]
    assert main["calls"] == 2 and main["wire_format"] == "chat" and main["path"] == "/v1/chat/completions"
    assert main["append_only"] and main["history_breaks"] == []
    assert list(main["tools"]) == ["bash"] and main["tools"]["bash"]["schema"] == BASH
    assert main["fields"] == {"temperature": 0.7}
    expected = normalise(SYSTEM["content"])
    assert "<date>" in expected and "<uuid>" in expected
    assert main["system_prompt"]["chars"] == len(expected)
    assert side["calls"] == 1 and side["tools"] == {} and side["fields"] == {"max_tokens": 20, "temperature": 0.7}


def test_per_rollout_values_do_not_change_it() -> None:
    """Another rollout id, date and session uuid: the same fingerprint."""
    other = [_chat(r.seq, json.loads(json.dumps(r.request["messages"]).replace(
        "0b7f7c1e-2a3b-4c5d-8e9f-0a1b2c3d4e5f", "99999999-2a3b-4c5d-8e9f-0a1b2c3d4e5f")),
        tool_list=r.request["tools"], rollout="r-zzz999", **{k: v for k, v in r.request.items()
                                                             if k not in ("model", "messages", "tools")})
        for r in _rollout(date="2027-01-31")]
    assert _fp(other) == _fp(_rollout())
    assert diff(_fp(_rollout()), _fp(other)) == []


def test_fields_that_vary_and_history_that_is_rewritten() -> None:
    records = _rollout()
    records[1].request["temperature"] = 0.2
    records[1].request["messages"][1] = {"role": "user", "content": "Append a line (compacted)."}
    main = _fp(records)["roles"]["main"]
    assert main["fields"]["temperature"] == VARIES
    assert not main["append_only"] and main["history_breaks"] == [2]
    changes = diff(_fp(_rollout()), _fp(records))
    assert "main: field `temperature`: 0.7 -> \"<varies>\"" in changes
    assert "main: history no longer append-only at call 2" in changes


def test_cache_markers_and_lone_text_blocks_keep_history_append_only() -> None:
    """Claude Code moves cache_control to the newest message and writes the older one back as a string."""
    first = {"role": "user", "content": [{"type": "text", "text": "Do it.", "cache_control": {"type": "ephemeral"}}]}
    records = [CallRecord("r-test-1", 0, "anthropic", "ok", path="/v1/messages?beta=true",
                          request={"model": "m", "system": [{"type": "text", "text": "Be brief."}],
                                   "messages": [first], "tools": [{"name": "Bash", "input_schema": BASH}],
                                   "max_tokens": 160}),
               CallRecord("r-test-1", 1, "anthropic", "ok", path="/v1/messages?beta=true",
                          request={"model": "m", "system": [{"type": "text", "text": "Be brief."}],
                                   "messages": [{"role": "user", "content": "Do it."},
                                                {"role": "assistant", "content": "done"}],
                                   "tools": [{"name": "Bash", "input_schema": BASH}], "max_tokens": 160})]
    main = _fp(records)["roles"]["main"]
    assert main["append_only"] and main["path"] == "/v1/messages"
    assert main["system_prompt"]["chars"] == len("Be brief.") and main["tools"]["Bash"]["schema"] == BASH
    assert main["fields"] == {"max_tokens": 160}


def test_system_prompt_and_tools_of_each_wire_format() -> None:
    assert system_text("responses", {"instructions": "A", "input": [{"role": "developer", "content": "B"},
                                                                    {"role": "user", "content": "C"}]}) == "A\nB"
    assert system_text("gemini", {"systemInstruction": {"parts": [{"text": "G"}]}}) == "G"
    assert system_text("chat", {"messages": [USER, {"role": "system", "content": "late"}]}) == ""
    assert tools("responses", {"tools": [{"type": "function", "name": "shell", "parameters": BASH},
                                         {"type": "web_search", "search_context_size": "low"}]}) == {
        "shell": {"schema": BASH, "description": ""},
        "web_search": {"schema": {"type": "web_search", "search_context_size": "low"}, "description": ""}}
    assert tools("gemini", {"tools": [{"functionDeclarations": [{"name": "run", "parameters": BASH}]}]}) == {
        "run": {"schema": BASH, "description": ""}}


def test_diff_names_each_change() -> None:
    before = _fp(_rollout())
    after = copy.deepcopy(before)
    main = after["roles"]["main"]
    schema = copy.deepcopy(BASH)
    schema["properties"]["timeout"] = {"type": "integer"}
    schema["properties"]["command"] = {"type": "array"}
    main["tools"]["bash"] = {**main["tools"]["bash"], "schema": schema, "schema_sha256": "x",
                             "description_sha256": "y"}
    main["tools"]["read"] = {"schema": BASH, "schema_sha256": "z", "description_sha256": "z"}
    main["system_prompt"] = {"sha256": "new", "chars": 1602}
    before["roles"]["main"]["system_prompt"]["chars"] = 1450
    main["fields"]["top_p"] = 0.9
    del main["fields"]["temperature"]
    del after["roles"]["side-1"]
    after["calls"], after["version"] = 2, "2.0"
    changes = diff(before, after)
    assert changes[0] == "calls per canary rollout: 3 -> 2"
    for line in ("main: tool `bash`: parameter `timeout` added ({\"type\": \"integer\"})",
                 "main: tool `bash`: parameter `command` changed (type \"string\" -> \"array\")",
                 "main: tool `bash`: description changed", "main: tool `read` added",
                 "main: field `top_p` added (0.9)", "main: field `temperature` no longer sent (was 0.7)",
                 "side-1 calls no longer made (1 chat call(s) to /v1/chat/completions)"):
        assert line in changes, (line, changes)
    assert any(c.startswith("main: system prompt changed: 1,450 -> 1,602 chars") for c in changes), changes
    assert diff(before, {**before, "version": "2.0"}) == [], "the version alone is no change"
    nested = copy.deepcopy(before)
    nested["roles"]["main"]["fields"]["reasoning"] = {"effort": "low", "summary": "auto"}
    deeper = copy.deepcopy(nested)
    deeper["roles"]["main"]["fields"]["reasoning"]["effort"] = "high"
    deeper["canary"] = {"status": "agent_error"}
    nested["canary"] = {"status": "ok"}
    assert diff(nested, deeper) == ["canary rollout ok -> agent_error",
                                    'main: field `reasoning`.effort: "low" -> "high"']


def test_version_drift() -> None:
    assert version_drift("pi", "1.6.0", "1.6.0", "1.6.0") is None
    assert version_drift("pi", "1.6.0", None, "1.7.0") is None  # nothing fingerprinted: nothing to drift from
    assert "1.7.0 (installed)" in str(version_drift("pi", "1.6.0", "1.6.0", "1.7.0"))
    assert "1.7.0 (pinned)" in str(version_drift("react", "1.7.0", "1.6.0", None))


def test_committed_fingerprints_are_beside_their_configs() -> None:
    """Each committed fingerprint is of its harness, at the version its config pins."""
    import yaml

    found = sorted((REPO / "configs" / "harness").glob("*.fingerprint.json"))
    assert found
    for path in found:
        config = path.with_name(path.name.replace(".fingerprint.json", ".yaml"))
        assert fingerprint_path(config) == path
        data = read_fingerprint(path)
        assert data is not None and data["harness"] == config.stem
        pinned = str(yaml.safe_load(config.read_text())["package"]["version"])
        assert pinned == data["version"], (f"{config} pins {pinned}, its fingerprint is of {data['version']}: "
                                           f"forge harness check +harness={config.stem}, then forge harness "
                                           f"fingerprint +harness={config.stem} --write")
        assert data["roles"]["main"]["calls"] >= 2, "the canary saw more than one call"


def test_doctor_checks_the_fingerprinted_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """forge doctor's cheap half: ok at the fingerprinted version, missing (with the fix) at another."""
    from forge_cli import prerequisites
    from forge_cli.config.compose import compose

    exp = compose(["+harness=pi"]).experiment
    [ok] = prerequisites.check_fingerprint(exp)
    assert ok.ok and ok.name == "harness fingerprint pi" and "1.6.0 fingerprinted" in ok.detail
    [bumped] = prerequisites.check_fingerprint(compose(["+harness=pi", "harness.package.version=1.7.0"]).experiment)
    assert not bumped.ok and "pi 1.7.0 (pinned) is not the version its fingerprint was taken from (1.6.0)" in \
        bumped.detail
    path = REPO / "configs" / "harness" / "pi.fingerprint.json"
    monkeypatch.setattr(prerequisites, "pinned_drift", lambda name, **_: (path, {"version": "1.6.0"}, version_drift(
        "pi", "1.6.0", "1.6.0", "1.7.0")))
    [drifted] = prerequisites.check_fingerprint(exp)
    assert not drifted.ok and "pi 1.7.0 (installed)" in drifted.detail
    assert "forge harness check +harness=pi" in drifted.fix and "--write" in drifted.fix
    monkeypatch.setattr(prerequisites, "pinned_drift", lambda name, **_: (path, None, None))
    [none] = prerequisites.check_fingerprint(exp)
    assert none.ok and "forge harness fingerprint +harness=pi --write" in none.detail


def test_train_guard_checks_a_harness_that_is_not_its_fingerprinted_version(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """forge train's guard: same version, nothing runs; another version, the check runs and a change refuses."""
    from forge_cli.cli.harness_fingerprint_cmd import guard_before_train
    from forge_cli.errors import UserError
    from forge_cli.harness.fingerprint_diff import write_fingerprint
    from forge_cli.testing import harness_canary

    pinned = _fp(_rollout(), version="1.0")
    taken: list[str] = []

    def canary(name: str, overrides: list[str], config_dir: Path | None, say: Any) -> dict[str, Any]:
        taken.append(name)
        return live

    monkeypatch.setattr(harness_canary, "run_canary", canary)
    config_dir = _fake_harness(tmp_path, "1.0", BASH)
    write_fingerprint(config_dir / "harness" / "fake.fingerprint.json", pinned)
    live = pinned
    guard_before_train("fake", config_dir, "local")
    assert taken == [], "the fingerprinted version: no canary"
    _fake_harness(tmp_path, "1.1", BASH)
    live = {**pinned, "version": "1.1"}
    guard_before_train("fake", config_dir, "local")
    assert taken == ["fake"] and "requests unchanged" in capsys.readouterr().err
    live = copy.deepcopy(live)
    live["roles"]["main"]["tools"]["bash"]["schema"] = {**BASH, "properties": {**BASH["properties"],
                                                                               "timeout": {"type": "integer"}}}
    live["roles"]["main"]["tools"]["bash"]["schema_sha256"] = "changed"
    with pytest.raises(UserError) as refused:
        guard_before_train("fake", config_dir, "local")
    assert "main: tool `bash`: parameter `timeout` added" in str(refused.value)
    assert "forge harness fingerprint +harness=fake --write" in str(refused.value.fix)


# ---------------------------------------------------------------- live (a canary rollout each, ~10-20 s)
FAKE = '''#!/usr/bin/env python3
import json, os, subprocess, sys, urllib.request
if sys.argv[1:] == ["--version"]:
    print("fake VERSION")
    sys.exit(0)
TOOLS = [{"type": "function", "function": {"name": "bash", "description": "Run a command.", "parameters": SCHEMA}}]
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
messages = [{"role": "system", "content": "You are a fake harness in " + os.getcwd() + "."},
            {"role": "user", "content": sys.argv[1]}]
for _ in range(4):
    body = {"model": os.environ["FAKE_MODEL"], "messages": messages, "tools": TOOLS, "temperature": 0.5}
    request = urllib.request.Request(os.environ["FAKE_BASE_URL"].rstrip("/") + "/chat/completions",
                                     json.dumps(body).encode(), {"Content-Type": "application/json",
                                                                 "Authorization": "Bearer " + os.environ["FAKE_KEY"]})
    message = json.load(opener.open(request))["choices"][0]["message"]
    messages.append({k: v for k, v in message.items() if v is not None})
    if not message.get("tool_calls"):
        break
    for call in message["tool_calls"]:
        done = subprocess.run(["bash", "-c", json.loads(call["function"]["arguments"])["command"]],
                              capture_output=True, text=True)
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": done.stdout + done.stderr})
'''


def _fake_harness(root: Path, version: str, schema: dict[str, Any]) -> Path:
    """A script harness speaking Chat Completions with one tool, ``bash`` of parameter schema ``schema``."""
    script = root / f"fake-{version}.py"
    script.write_text(FAKE.replace("VERSION", version).replace("SCHEMA", repr(schema)))
    script.chmod(0o755)
    config_dir = root / "configs"
    (config_dir / "harness").mkdir(parents=True, exist_ok=True)
    (config_dir / "harness" / "fake.yaml").write_text(f"""# a fake harness
name: fake
description: a script harness with one tool
package: {{manager: binary, name: fake, version: "{version}"}}
runtime: native
wire_api: chat
entrypoint: fake
binary_path: {script}
env:
  FAKE_BASE_URL: "{{{{base_url}}}}"
  FAKE_KEY: "{{{{api_key}}}}"
  FAKE_MODEL: "{{{{model}}}}"
command: [fake, "{{{{instruction}}}}"]
exit_codes: {{0: ok}}
timeout_s: 120
""")
    return config_dir


def _cli(tmp_path: Path, *args: str, config_dir: Path | None = None) -> tuple[int, str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    for shared in ("envs", "models", "harnesses"):
        if not (home / shared).exists() and (shared != "harnesses" or config_dir is None):
            (home / shared).symlink_to(forge_home() / shared)
    extra = ["--config-dir", str(config_dir)] if config_dir is not None else []
    done = forge("harness", *args, *extra, env={"FORGE_HOME": str(home)}, timeout=900)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stdout, done.stderr


@pytest.mark.mitm
def test_check_fails_naming_the_changed_tool_schema_of_a_fake_harness(tmp_path: Path) -> None:
    config_dir = _fake_harness(tmp_path, "1.0", BASH)
    code, _, err = _cli(tmp_path, "check", "+harness=fake", "runtime=local", config_dir=config_dir)
    assert code == 2 and "no fingerprint" in err and "forge harness fingerprint +harness=fake --write" in err
    code, _, err = _cli(tmp_path, "fingerprint", "+harness=fake", "runtime=local", "--write", config_dir=config_dir)
    assert code == 0, err
    assert "canary rollout ok" in err and "2 calls recorded" in err
    written = read_fingerprint(config_dir / "harness" / "fake.fingerprint.json")
    assert written is not None and written["version"] == "1.0"
    main = written["roles"]["main"]
    assert main["tools"]["bash"]["schema"] == BASH and main["append_only"] and main["calls"] == 2
    assert "<sandbox>" in json.dumps(written) or "/work" not in json.dumps(written)  # the workdir normalised
    code, out, err = _cli(tmp_path, "check", "+harness=fake", "runtime=local", config_dir=config_dir)
    assert code == 0, out + err
    assert "requests unchanged" in out
    # version 1.1 adds a parameter to its tool
    changed = copy.deepcopy(BASH)
    changed["properties"]["timeout"] = {"type": "integer", "description": "seconds"}
    _fake_harness(tmp_path, "1.1", changed)
    code, out, err = _cli(tmp_path, "check", "+harness=fake", "runtime=local", config_dir=config_dir)
    assert code == 1, out + err
    assert "is not the version its fingerprint was taken from (1.0)" in err
    assert "main: tool `bash`: parameter `timeout` added" in out, out


@pytest.mark.docker
@pytest.mark.mitm
def test_react_fingerprint_twice_is_the_same(tmp_path: Path) -> None:
    """Back to back, the same version: equal fingerprints (and equal to the committed one)."""
    taken = []
    for _ in range(2):
        code, out, err = _cli(tmp_path, "fingerprint", "+harness=react")
        assert code == 0, err
        taken.append(json.loads(out))
    assert diff(taken[0], taken[1]) == [] and taken[0]["roles"] == taken[1]["roles"]
    assert taken[0]["roles"]["main"]["calls"] >= 2
    committed = read_fingerprint(REPO / "configs" / "harness" / "react.fingerprint.json")
    assert committed is not None and diff(committed, taken[0]) == []


@pytest.mark.docker
@pytest.mark.mitm
@pytest.mark.requires("harness:pi")
def test_pi_matches_its_committed_fingerprint(tmp_path: Path) -> None:
    code, out, err = _cli(tmp_path, "check", "+harness=pi")
    assert code == 0, out + err
    assert "requests unchanged" in out
