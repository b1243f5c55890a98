"""``{{name}}`` placeholders in harness config files, env vars and commands.

A tiny renderer rather than Jinja or ``str.format``: harness configs are JSON/TOML/JSON5 full of
braces, and OmegaConf already owns ``${...}``. Unknown names are errors, never left in place.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from forge_cli.errors import UserError

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")

# every name a harness template may use, with what it holds
VARIABLES: dict[str, str] = {
    "base_url": "proxy URL for this rollout, ending in /v1 (http://<proxy>/r/<rollout-id>/v1)",
    "base_url_root": "the same without /v1 (Anthropic and Gemini clients add it themselves)",
    "api_key": "this rollout's key at the proxy",
    "model": "model name the harness asks for",
    "context_window": "context length of the served model, in tokens",
    "max_output_tokens": "largest output per call, in tokens",
    "instruction": "the task's instruction",
    "workdir": "the task's working directory inside the sandbox",
    "home": "the harness's HOME inside the sandbox",
    "bundle": "where the harness bundle is mounted inside the sandbox",
    "rollout_id": "this rollout's id",
    # only for tasks with tools (harness `tools:` section)
    "tools_url": "this rollout's tools at the tool server (http://<tool server>/r/<rollout-id>)",
    "mcp_url": "this rollout's MCP endpoint ({{tools_url}}/mcp, Streamable HTTP)",
    "tools_key": "this rollout's key at the tool server (Authorization: Bearer)",
    "skill_dir": "where the generated skill directory is written (harness tools.skill_dir)",
}


def names(template: str) -> set[str]:
    return set(PLACEHOLDER.findall(template))


def render(template: str, values: Mapping[str, str]) -> str:
    """Fill every ``{{name}}``; a name with no value raises a UserError naming it."""

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise UserError(
                f"unknown template variable {{{{{name}}}}}",
                fix=f"use one of: {', '.join(sorted(values))}",
                exit_code=2,
            )
        return str(values[name])

    return PLACEHOLDER.sub(fill, template)
