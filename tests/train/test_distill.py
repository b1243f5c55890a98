"""`forge distill` (forge_cli/train/distill.py): a real harness (pi, local sandbox) runs builtin train tasks against
the teacher stand-in made to behave like a paid API (a required key, vLLM's own fields refused, rate limits); the
kept rollouts become SFT samples; the key never reaches a record, a log or the run directory; the token cap stops
new rollouts; evaluation splits are refused."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from forge_cli.paths import forge_home
from tests.envs.test_teacher_standin import standin
from tests.helpers import forge

pytestmark = [pytest.mark.mitm, pytest.mark.requires("harness:pi", "model")]
KEY = "sk-teacher-" + "x7Q2" * 8
TASKS = "env.task_ids=[create-edit-append-line-0,search-count-count-lines-0,json-csv-json-field-0]"


@pytest.fixture()
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    for shared in ("envs", "models", "harnesses"):
        (home / shared).symlink_to(forge_home() / shared)
    return home


def _distill(home: Path, tmp_path: Path, url: str, *args: str) -> Any:
    return forge("distill", "--json", "+harness=pi", "runtime=local", "proxy.port=0", f"run.output_dir={tmp_path}",
                 "--teacher", url, "--teacher-model", "teacher-large", *args, timeout=900,
                 env={"FORGE_HOME": str(home), "TEACHER_KEY": KEY})


def _files_holding(root: Path, needle: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and needle in p.read_bytes()]


def test_pi_against_a_paid_api_keeps_the_passing_rollouts_and_never_stores_the_key(home: Path,
                                                                                   tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    teacher = standin.builtin_teacher(key=KEY, busy=1)  # the first request is rate limited
    with standin.TeacherServer(teacher) as server:
        done = _distill(home, tmp_path / "runs", server.base_url, "--key-env", "TEACHER_KEY", TASKS)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["kept"] == 3 and summary["sft"]["sequences"] == 3, summary
    assert summary["teacher_tokens"] > 0 and summary["teacher"] == "teacher-large"
    assert teacher.keys_seen == {KEY}, "every request carried the teacher's key, and only it"
    assert set(teacher.served) <= {"create-edit-append-line-0", "search-count-count-lines-0", "json-csv-json-field-0"}
    table = pq.read_table(summary["sft"]["out"])
    assert table.num_rows == 3 and all(sum(m) > 0 for m in table.column("loss_mask").to_pylist())
    # the key: in no file of the run (records, logs, config) nor of forge's home (proxy logs), nor on stdout/stderr
    assert not _files_holding(tmp_path / "runs", KEY.encode())
    assert not _files_holding(home, KEY.encode())
    assert KEY not in done.stdout + done.stderr
    config = (Path(summary["run_dir"]) / "config.yaml").read_text()
    assert "api_key_env: TEACHER_KEY" in config and "request_token_ids: false" in config


@pytest.mark.parametrize("cap", [["--max-tokens", "10"], ["--max-cost", "0.0001", "--price", "3,15"]],
                         ids=["tokens", "cost"])
def test_a_spending_cap_stops_new_rollouts(home: Path, tmp_path: Path, cap: list[str]) -> None:
    with standin.TeacherServer(standin.builtin_teacher()) as server:
        done = _distill(home, tmp_path / "runs", server.base_url, *cap, "rollout.concurrency=1", TASKS)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["rollouts"] == 1 and summary["teacher_tokens"] >= 10, summary
    assert summary["teacher_tokens"] == summary["teacher_prompt_tokens"] + summary["teacher_completion_tokens"]
    if cap[0] == "--max-tokens":
        assert summary["token_cap_reached"] and not summary["cost_cap_reached"] and summary["teacher_cost_usd"] is None
    else:
        cost = (3 * summary["teacher_prompt_tokens"] + 15 * summary["teacher_completion_tokens"]) / 1e6
        assert summary["cost_cap_reached"] and summary["teacher_cost_usd"] == pytest.approx(cost) and cost >= 0.0001


def test_bad_input_is_one_message_exit_2(home: Path, tmp_path: Path) -> None:
    for args, needle in ((["distill", "+harness=pi"], "needs --teacher"),
                         (["distill", "--teacher", "127.0.0.1:9", "+harness=pi"], "not an http(s) URL"),
                         (["distill", "--teacher", "http://127.0.0.1:9/v1", "--trials", "0"], "--trials"),
                         (["distill", "--teacher", "http://127.0.0.1:9/v1", "--max-cost", "5"], "needs the teacher's "
                                                                                                 "--price"),
                         (["distill", "--teacher", "http://127.0.0.1:9/v1", "--price", "3"], "not IN,OUT"),
                         (["distill", "--teacher", "http://127.0.0.1:9/v1", "+harness=pi", "env.split=test",
                           f"run.output_dir={tmp_path}"], "training tasks only"),
                         (["distill", "--teacher", "http://127.0.0.1:9/v1", "--key-env", "NO_SUCH_KEY_VAR",
                           "+harness=pi", "runtime=local", f"run.output_dir={tmp_path}", TASKS], "NO_SUCH_KEY_VAR")):
        done = forge(*args, env={"FORGE_HOME": str(home)}, timeout=300)
        assert done.returncode == 2 and needle in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
    assert "NO_SUCH_KEY_VAR" not in os.environ
