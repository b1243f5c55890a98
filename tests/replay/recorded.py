"""A recorded react run for the replay and branch tests: two rollouts of one builtin task in local sandboxes, each
first call answered with a command (vLLM constrained to that text: ``forge_cli/testing/tool_relay.py``), so the
second call carries the command's result; the calls after it are sampled freely."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from forge_cli.testing.tool_relay import ToolRelay
from tests.helpers import forge_json

FIRST_REPLY = "```bash\nls -a\n```"


def record_react(tmp_path: Path, policy_url: str) -> tuple[Path, list[dict[str, Any]]]:
    """The run directory and its results (one per rollout)."""
    with ToolRelay(policy_url, tool_turns=0, first_reply=FIRST_REPLY) as relay:
        recorded = forge_json(tmp_path / "sbx", "rollout", f"proxy.upstream={relay.url}", "proxy.port=0",
                              "rollout.max_tasks=1", "rollout.samples_per_task=2", "model.max_output_tokens=48",
                              f"run.output_dir={tmp_path / 'rec'}")
    run_dir = Path(recorded["run_dir"])
    return run_dir, [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
