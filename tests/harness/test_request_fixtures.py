"""The recorded request bodies of the real harnesses (tests/fixtures/harness_requests/, made by
scripts/record-harness-requests.py): each parses, matches its harness config, has its wire format's
shape, and carries no key, host, port or machine path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from forge_cli.config.schema import WIRE_API_ALIASES
from forge_cli.paths import configs_dir

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "harness_requests"
RECORDED = ["claude-code", "codex", "gemini-cli", "mini-swe-agent", "openclaw", "opencode", "pi", "qwen-code"]
ROUTES = {"chat": "/v1/chat/completions", "responses": "/v1/responses",
          "anthropic": "/v1/messages", "gemini": "/v1beta/models/policy:streamGenerateContent"}
CREDENTIAL = {"chat": "authorization", "responses": "authorization", "anthropic": "x-api-key",
              "gemini": "x-goog-api-key"}


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


def test_every_real_harness_is_recorded() -> None:
    assert sorted(p.stem for p in FIXTURES.glob("*.json")) == RECORDED
    assert (FIXTURES / "README.md").is_file()


def _check_chat(body: dict[str, Any]) -> None:
    assert body["messages"] and all(m["role"] in ("system", "developer", "user", "assistant", "tool")
                                    for m in body["messages"])
    assert body["messages"][-1]["role"] == "user"
    for tool in body.get("tools", []):
        assert tool["type"] == "function" and tool["function"]["name"]
    if body.get("stream"):
        assert body.get("stream_options", {}).get("include_usage") in (True, None)


def _check_responses(body: dict[str, Any]) -> None:
    assert body["stream"] is True and isinstance(body["input"], list) and body["input"]
    assert any(item.get("role") == "user" for item in body["input"])
    assert all(tool.get("type") for tool in body.get("tools", []))


def _check_gemini(body: dict[str, Any]) -> None:
    """Gemini API: no model or stream flag in the body (both are in the path), parts-based contents."""
    assert "model" not in body and "stream" not in body
    assert body["contents"] and all(c["role"] in ("user", "model") for c in body["contents"])
    assert body["contents"][-1]["role"] == "user" and body["systemInstruction"]["parts"][0]["text"]
    for tool in body.get("tools", []):
        for declaration in tool.get("functionDeclarations", []):
            assert declaration["name"] and ("parameters" in declaration or "parametersJsonSchema" in declaration)


def _check_messages(body: dict[str, Any]) -> None:
    assert body["stream"] is True and body["max_tokens"] > 0 and body["messages"][0]["role"] == "user"
    system = body.get("system", [])
    assert isinstance(system, str | list)
    for tool in body.get("tools", []):
        assert tool["name"] and "input_schema" in tool


@pytest.mark.parametrize("name", RECORDED)
def test_fixture_shape(name: str) -> None:
    fixture = load(name)
    config = yaml.safe_load((configs_dir() / "harness" / f"{name}.yaml").read_text())
    wire = config["wire_api"]
    # the fixtures were recorded before wire_api took the proxy's names: their old spelling reads as the new one
    assert fixture["harness"] == name and WIRE_API_ALIASES.get(fixture["wire_api"], fixture["wire_api"]) == wire
    assert fixture["package"] == f"{config['package']['name']}@{config['package']['version']}"
    assert fixture["requests"][0]["body"] == fixture["body"] and fixture["requests"][0]["path"] == fixture["path"]
    for request in fixture["requests"]:
        assert request["method"] == "POST"
        assert request["path"].split("?")[0].endswith(ROUTES[wire])
        assert request["path"].startswith("/r/")  # the harness kept the rollout prefix of its base URL
        assert request["credential_headers"] == [CREDENTIAL[wire]]
        assert request["headers"]["content-type"].startswith("application/json")
        body = request["body"]
        assert body.get("model", "policy") == "policy"
        {"chat": _check_chat, "responses": _check_responses, "anthropic": _check_messages,
         "gemini": _check_gemini}[wire](body)
    # the task instruction reached the model in the harness's first call that carries tools
    assert fixture["instruction"] in json.dumps(fixture["requests"][-1]["body"])


def test_streaming_per_harness() -> None:
    """mini-swe-agent is the one harness that does not stream (docs/harnesses.md); Gemini CLI streams by its path."""
    streams = {name: bool(load(name)["body"].get("stream")) or ":streamGenerateContent?alt=sse" in load(name)["path"]
               for name in RECORDED}
    assert streams == {name: name != "mini-swe-agent" for name in RECORDED}


@pytest.mark.parametrize("name", RECORDED)
def test_fixture_is_scrubbed(name: str) -> None:
    text = (FIXTURES / f"{name}.json").read_text()
    for leaked in ("forge-recording-key", "127.0.0.1", "forge-rec-", "/root/", "/work/main", "pytest-of-"):
        assert leaked not in text, leaked
    for request in load(name)["requests"]:
        assert not {"authorization", "x-api-key", "x-goog-api-key", "cookie"} & set(request["headers"])
        assert "key=" not in request["path"]
