"""The harness drift guard's canary: one builtin **train** task through a harness, every model call answered by the
teacher stand-in (``forge_cli/testing/teacher_standin.py``: a tool call running the reference solution, then a final
answer, so the harness's multi-call behaviour is seen) through the capture proxy, in a sandbox; the fingerprint of
the recorded calls (``forge_cli/harness/fingerprint.py``).

The rollout is ``forge rollout`` in a child process (as a user would run it) writing into a temporary run directory
that is removed afterwards; the stand-in runs in this process on a free loopback port.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from forge_cli.errors import UserError
from forge_cli.harness.fingerprint import fingerprint
from forge_cli.harness.fingerprint_diff import installed_version
from forge_cli.rollout.reader import read_run
from forge_cli.testing.teacher_standin import TeacherServer, builtin_teacher

# the canary: a train task the stand-in solves in two calls (a tool call running the reference solution, then
# a final answer; forge-react: a fenced bash block, then ACTION: finish)
CANARY_TASK = "create-edit-append-line-0"
DEFAULT_RUNTIME = "docker"


def harness_name(overrides: list[str]) -> tuple[str, list[str]]:
    """The harness named by ``+harness=H`` (or ``harness=H``) and the other overrides."""
    name, rest = None, []
    for item in overrides:
        key, _, value = item.partition("=")
        if key.lstrip("+~") == "harness" and value:
            name = value
        else:
            rest.append(item)
    if name is None:
        raise UserError("which harness? name it with +harness=NAME", fix="forge harness fingerprint +harness=pi",
                        exit_code=2)
    return name, rest


def run_canary(name: str, overrides: list[str], config_dir: Path | None, say: Callable[[str], None]
               ) -> dict[str, Any]:
    """Run the canary through harness ``name`` and return its fingerprint (UserError when no call was recorded)."""
    pinned, installed = installed_version(name, config_dir)
    runtime = next((o.partition("=")[2] for o in overrides if o.partition("=")[0].lstrip("+") == "runtime"),
                   DEFAULT_RUNTIME)
    say(f"canary: harness {name} {installed or pinned}, builtin train task {CANARY_TASK}, runtime {runtime}, "
        "every call answered by the teacher stand-in")
    with tempfile.TemporaryDirectory(prefix="forge-canary-") as tmp, TeacherServer(builtin_teacher()) as server:
        say(f"teacher stand-in on {server.base_url}")
        sandboxes = Path(tmp) / "sbx"
        args = [sys.executable, "-m", "forge_cli", "rollout", "--json", f"+harness={name}",
                f"runtime={DEFAULT_RUNTIME}", f"proxy.upstream={server.base_url.removesuffix('/v1')}", "proxy.port=0",
                "env=builtin", "env.split=train", f"env.task_ids=[{CANARY_TASK}]", "rollout.samples_per_task=1",
                f"run.output_dir={Path(tmp) / 'runs'}", *overrides]
        if config_dir is not None:
            args += ["--config-dir", str(config_dir)]
        say("running the canary rollout (forge rollout)...")
        done = subprocess.run(args, capture_output=True, text=True, check=False, timeout=1800,
                              env={**os.environ, "COLUMNS": "200", "FORGE_SANDBOX_DIR": str(sandboxes)})
        if done.returncode != 0:
            raise UserError(f"the canary rollout failed (forge rollout exit {done.returncode}): "
                            f"{done.stderr.strip()[-2000:]}", exit_code=2)
        run_dir = Path(json.loads(done.stdout)["run_dir"])
        rollouts = list(read_run(run_dir))
        if not rollouts or not rollouts[0].calls:
            status = rollouts[0].result.status if rollouts else "none"
            raise UserError(f"the canary rollout through {name} recorded no model call (status {status})",
                            fix=f"forge doctor +harness={name} runtime={runtime}", exit_code=2)
        rollout = rollouts[0]
        say(f"canary rollout {rollout.result.status}, reward {rollout.result.reward}, {len(rollout.calls)} calls "
            "recorded")
        return fingerprint(rollout.calls, harness=name, version=str(installed or pinned),
                           # a local sandbox: SANDBOXES/<run>/<name>-<random>/{work,home,tmp}
                           literals=[(re.escape(str(sandboxes)) + r"/[^/\s\"']+/[^/\s\"']+", "<sandbox>"),
                                     (re.escape(tmp), "<tmp>")],
                           canary={"task": CANARY_TASK, "runtime": runtime, "upstream": "teacher stand-in",
                                   "status": rollout.result.status, "reward": rollout.result.reward})
