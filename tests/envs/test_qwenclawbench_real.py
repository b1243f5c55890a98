"""`env=qwenclawbench` against a real QwenClawBench checkout: set ``FORGE_QWENCLAWBENCH_PATH`` to one (a clone of
github.com/SKYLENAGE-AI/QwenClawBench; upstream e4eefcf was used here). Skipped, with that reason, without it (CI).

- Grader parity: three real tasks run through ``react`` by a scripted policy (and a scripted judge); for every
  trial forge's grade equals what the checkout's own ``lib_grading.grade_task`` gives, called directly on the
  transcript and workspace forge saved in QwenClawBench's batch layout.
- Three real tasks through ``react`` on the default model (the vLLM ``policy_server`` fixture), no judge: each
  trial ends with a grade or "not judged", never an infra error.
- The same three through the real ``openclaw`` harness (its bundle, local sandbox) on the default model served at
  32,768 tokens (``long_context_server``: OpenClaw's own first prompt is ~8,800 tokens), graded on OpenClaw's own
  session (its session database), never an infra error. Measured here (2 loaded cores, float32 vLLM): one call per
  task (9,200-9,700 prompt tokens, 64 completion tokens, ~300 s each, in parallel), scores 0.0 / 0.264 / 0.0;
  the test 6.5 min with vLLM's start.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import LONG_CONTEXT
from tests.envs.qwenclawbench_policy import Policy, call, serve
from tests.envs.test_qwenclawbench import _eval, openclaw_installed

CHECKOUT = os.environ.get("FORGE_QWENCLAWBENCH_PATH", "")
pytestmark = [pytest.mark.mitm, pytest.mark.requires("qwenclawbench-checkout")]

LARGEST = ("cd downloads && ls -l annual_sales_report_2024.csv app_config.yaml backup.sh "
           "product_catalog_api_response.json README_setup.txt server_access.log | sort -k5 -n | tail -n 1 "
           "| awk '{print $9\": \"$5\" bytes\"}' > text_file_size_report.txt; cat text_file_size_report.txt")
TASKS = {
    "task_00036_find_largest_file_in_downloads_directory": [
        call("bash", command="ls -l downloads"), call("bash", command=LARGEST),
        call("finish", "The largest text-like file in downloads/ is annual_sales_report_2024.csv: 20403 bytes "
                       "(binary files such as the .pdf, .zip and .png were ignored). I saved this to "
                       "downloads/text_file_size_report.txt.", summary="report written")],
    "task_00008_heartbeat_joke_scheduler_with_conditional_dispatch": [
        call("read_file", path="HEARTBEAT.md"), call("bash", command="ls -la"),
        call("finish", "I checked every trigger in HEARTBEAT.md against the workspace.", summary="checked")],
    "task_00002_workspace_onboarding_and_identity_scaffold_skill": [
        call("bash", command="ls -la"), call("write_file", path="IDENTITY.md", content="# Identity\nName: Forge\n"),
        call("finish", "Created IDENTITY.md.", summary="created")],
}
IDS = "env.task_ids=[" + ",".join(TASKS) + "]"
# what the key phrase of each prompt is: the scripted policy recognises a task by its workspace files
KEYS = {"downloads": TASKS["task_00036_find_largest_file_in_downloads_directory"],
        "HEARTBEAT.md": TASKS["task_00008_heartbeat_joke_scheduler_with_conditional_dispatch"]}

DIRECT = r"""
import json, sys
from pathlib import Path
checkout, task_file, trial_dir = sys.argv[1:4]
sys.path.insert(0, str(Path(checkout) / "scripts"))
import lib_grading, lib_tasks
task = lib_tasks.TaskLoader(Path(task_file).parent).load_task(Path(task_file))
transcript = json.loads((Path(trial_dir) / "transcript.json").read_text())
grade = lib_grading.grade_task(task=task, execution_result={"transcript": transcript,
    "workspace": str(Path(trial_dir) / "workspace"), "status": "success"},
    skill_dir=Path(checkout), judge_model="judge")
print("@@" + json.dumps(grade.to_dict()))
"""


def _direct_grade(task_id: str, trial_dir: Path, judge_url: str) -> dict[str, Any]:
    (task_file,) = (Path(CHECKOUT) / "data" / "qwenclawbench-v1.1-100" / "tasks").glob(f"{task_id}.md")
    done = subprocess.run([sys.executable, "-c", DIRECT, CHECKOUT, str(task_file), str(trial_dir)],
                          capture_output=True, text=True, timeout=300, cwd=trial_dir,
                          env={**os.environ, "JUDGE_BASE_URL": judge_url, "JUDGE_API_KEY": "x"})
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout.rpartition("@@")[2]))


def test_grader_parity_on_three_real_tasks(tmp_path: Path) -> None:
    policy = Policy({**KEYS, "": TASKS["task_00002_workspace_onboarding_and_identity_scaffold_skill"]})
    with serve(policy) as url:
        code, report, stderr = _eval(tmp_path, url, f"env.path={CHECKOUT}", IDS, "eval.trials=1",
                                     f"env.options.judge.base_url={url}/v1", "env.options.judge.model=judge",
                                     "rollout.timeout_s=300")
        assert code == 0, stderr[-3000:]
        batch = Path(report["meta"]["benchmark"]["dir"])
        figures = []
        for task in report["tasks"]:
            (trial,) = task["trials"]
            assert trial["status"] == "ok", trial
            ours = json.loads((batch / task["task_id"] / "grading.json").read_text())
            theirs = _direct_grade(task["task_id"], batch / task["task_id"], f"{url}/v1")
            figures.append((task["task_id"], ours["score"], theirs["score"]))
            assert ours == theirs, (task["task_id"], ours, theirs)
            assert trial["reward"] == pytest.approx(min(ours["score"], 1.0))
    print("\n[parity] task, forge score, lib_grading score:", *figures, sep="\n  ")


@pytest.mark.vllm
def test_three_real_tasks_through_react_on_the_default_model(tmp_path: Path, policy_server: Any) -> None:
    code, report, stderr = _eval(
        tmp_path, policy_server.url, f"env.path={CHECKOUT}", IDS, "eval.trials=1", "model.max_output_tokens=64",
        'harness.command=[python3,"{{bundle}}/bin/forge-react",--max-steps,"3","{{instruction}}"]',
        "rollout.timeout_s=600", "env.options.judge.base_url=null")
    assert code == 0, stderr[-3000:]
    trials = [t for task in report["tasks"] for t in task["trials"]]
    print("\n[real] " + "\n[real] ".join(f"{t['task_id']}: {t['status']} reward={t['reward']} "
                                          f"error={(t['error'] or '')[:120]}" for t in trials))
    assert len(trials) == 3 and all(t["status"] != "infra_error" for t in trials), trials
    assert all(t["reward"] is not None or "not judged" in (t["error"] or "") for t in trials)


@pytest.mark.vllm
def test_three_real_tasks_through_openclaw_on_the_default_model(tmp_path: Path, long_context_server: Any) -> None:
    openclaw_installed()
    code, report, stderr = _eval(
        tmp_path, long_context_server.url, f"env.path={CHECKOUT}", IDS, "eval.trials=1", "harness=openclaw",
        "model.max_output_tokens=64", f"model.max_model_len={LONG_CONTEXT}", "harness.timeout_s=900",
        "rollout.timeout_s=1200", "env.options.judge.base_url=null", timeout=1800)
    assert code == 0, stderr[-3000:]
    trials = [t for task in report["tasks"] for t in task["trials"]]
    logs = {t["task_id"]: (Path(t["logs"]) / "verifier.log").read_text() for t in trials}
    print("\n[openclaw] " + "\n[openclaw] ".join(
        f"{t['task_id']}: {t['status']} reward={t['reward']} calls={t['calls']} {t['duration_s']:.0f}s "
        f"error={(t['error'] or '')[:120]}" for t in trials))
    assert len(trials) == 3 and all(t["status"] != "infra_error" for t in trials), trials
    assert all(t["reward"] is not None or "not judged" in (t["error"] or "") for t in trials)
    assert all("transcript: openclaw session database" in log for log in logs.values()), logs
