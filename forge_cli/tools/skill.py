"""Skill files for harnesses without MCP: the same tools described as HTTP calls to the tool server.

A skill directory holds ``SKILL.md`` (Agent Skills format: front matter with name and description, then one
section per tool with its JSON schema and a curl example) and ``call.py``, a stdlib-only caller for images
without curl (``python3 call.py TOOL '{"arg": 1}'``).
"""

from __future__ import annotations

import json
import shlex

from forge_cli.tools.spec import ToolSpec

SKILL_NAME = "forge-task-tools"

CALLER = '''#!/usr/bin/env python3
"""Call one task tool: python3 call.py TOOL '{"arg": "value"}'  (no arguments: list the tools)."""
import json
import sys
import urllib.error
import urllib.request

URL = %(url)r
KEY = %(key)r


def main() -> int:
    name = sys.argv[1] if len(sys.argv) > 1 else ""
    body = (sys.argv[2] if len(sys.argv) > 2 else "{}").encode() if name else None
    request = urllib.request.Request(f"{URL}/tools/{name}".rstrip("/"), data=body, method="POST" if name else "GET",
                                     headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            print(response.read().decode())
            return 0
    except urllib.error.HTTPError as error:
        print(error.read().decode(), file=sys.stderr)
        return 1


sys.exit(main())
'''


def skill_markdown(tools: tuple[ToolSpec, ...], url: str, key: str, skill_dir: str) -> str:
    """``SKILL.md`` for ``tools`` served at ``url`` (``http://<host>:<port>/r/<rollout id>``) with ``key``."""
    names = ", ".join(t.name for t in tools)
    lines = [
        "---",
        f"name: {SKILL_NAME}",
        f"description: Tools for the current task ({names}), called over HTTP. Use them whenever the task "
        "mentions them.",
        "---",
        "",
        "# Task tools",
        "",
        f"This task gives you these tools: {names}. Call a tool by POSTing its arguments as one JSON object to "
        f"`{url}/tools/<tool name>` with the header `Authorization: Bearer {key}`. The answer is JSON: "
        '`{"result": ..., "is_error": false}` (`is_error: true` when the call failed; the result says why).',
        "",
        f"Without curl, the same call is: `python3 {skill_dir}/call.py <tool name> '<JSON arguments>'` "
        "(call.py lies next to this file).",
    ]
    for tool in tools:
        example = {k: f"<{k}>" for k in tool.input_schema.get("required", [])}
        curl = shlex.join(["curl", "-s", "-X", "POST", f"{url}/tools/{tool.name}", "-H",
                           f"Authorization: Bearer {key}", "-H", "Content-Type: application/json",
                           "-d", json.dumps(example)])
        lines += ["", f"## {tool.name}", "", tool.description, "", "Arguments (JSON Schema):", "", "```json",
                  json.dumps(tool.input_schema, indent=2), "```", "", "```bash", curl, "```"]
    return "\n".join(lines) + "\n"


def skill_files(tools: tuple[ToolSpec, ...], url: str, key: str, skill_dir: str) -> dict[str, str]:
    """The files of the skill directory ``skill_dir`` (path → content)."""
    return {f"{skill_dir}/SKILL.md": skill_markdown(tools, url, key, skill_dir),
            f"{skill_dir}/call.py": CALLER % {"url": url, "key": key}}
