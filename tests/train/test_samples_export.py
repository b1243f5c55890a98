"""`forge samples export` on run directories written through the real trace store: Parquet and the ``datasets``
directory layout, the decoded text beside the token ids, options read from the run's config, bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from forge_cli.rollout.result import RolloutResult
from forge_cli.traces.record import JSON_COLUMNS, CallRecord
from forge_cli.traces.store import CALL_FIELDS, insert_calls, open_store
from forge_cli.train.samples_export import ARROW_FILE, COLUMNS, read_samples
from tests.helpers import forge

WORDS = ["<pad>", "sys", "ask", "ans", "tool", "more", "end", "other"]


def _tokenizer(tmp_path: Path) -> Path:
    """A word-level tokenizer.json: id i decodes to WORDS[i] (words joined by spaces)."""
    from tokenizers import Tokenizer, models

    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<pad>"))
    directory = tmp_path / "tok"
    directory.mkdir()
    tokenizer.save(str(directory / "tokenizer.json"))
    return directory


def _call(rid: str, seq: int, prompt: list[int], completion: list[int], status: str = "ok") -> CallRecord:
    return CallRecord(rollout_id=rid, seq=seq, wire_format="chat", status=status, prompt_token_ids=prompt,
                      completion_token_ids=completion, completion_logprobs=[-0.5 - i for i in range(len(completion))],
                      weight_version="0")


def _run_dir(tmp_path: Path, config: dict[str, Any] | None = None) -> Path:
    """Two groups in steps 0 and 1: a merged rollout, a two-segment one, a timeout, an infra error."""
    run_dir = tmp_path / "run"
    rollouts = {
        ("a", "g0", 0, "ok", 1.0): [_call("a", 0, [1, 2], [3]), _call("a", 1, [1, 2, 3, 4], [5, 6])],
        ("b", "g0", 0, "ok", 0.0): [_call("b", 0, [1, 2], [3]), _call("b", 1, [1, 7], [5])],
        ("c", "g1", 1, "timeout", 1.0): [_call("c", 0, [1, 2], [3, 6])],
        ("d", "g1", 1, "infra_error", None): [_call("d", 0, [1, 2], [3])],
    }
    conn = open_store(run_dir / "traces.sqlite")
    lines = []
    for (rid, group, step, status, reward), calls in rollouts.items():
        lines.append(json.dumps(RolloutResult(rollout_id=rid, task_id=f"task-{group}", group_id=group, harness="react",
                                              status=status, reward=reward, step=step).to_dict()))  # type: ignore[arg-type]
        rows = []
        for call in calls:
            data = call.to_dict()
            rows.append(tuple(json.dumps(data[f]) if f in JSON_COLUMNS and data[f] is not None else data[f]
                              for f in CALL_FIELDS))
        insert_calls(conn, rows)
    conn.commit()
    conn.close()
    (run_dir / "results.jsonl").write_text("\n".join(lines) + "\n")
    if config is not None:
        (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    return run_dir


def _export(*args: str) -> tuple[int, str, str]:
    result = forge("samples", "export", *args)
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, result.stdout, result.stderr


def test_parquet_holds_the_samples_and_their_text(tmp_path: Path) -> None:
    run_dir, out = _run_dir(tmp_path), tmp_path / "out" / "samples.parquet"
    code, stdout, stderr = _export(str(run_dir), str(out), "--tokenizer", str(_tokenizer(tmp_path)))
    assert code == 0, stderr
    assert stdout.splitlines()[0] == f"wrote 4 samples from 3 of 4 rollouts (2 groups) to {out}"
    rows = read_samples(out)
    assert list(rows[0]) == list(COLUMNS)
    assert [(r["rollout_id"], r["segment"], r["group_id"], r["step"], r["status"]) for r in rows] == [
        ("a", 0, "g0", 0, "ok"), ("b", 0, "g0", 0, "ok"), ("b", 1, "g0", 0, "ok"), ("c", 0, "g1", 1, "timeout")]
    a = rows[0]
    assert (a["prompt_ids"], a["response_ids"], a["loss_mask"]) == ([1, 2], [3, 4, 5, 6], [1, 0, 1, 1])
    assert a["rollout_logprobs"] == [-0.5, 0.0, -0.5, -1.5]
    assert (a["prompt_text"], a["response_text"]) == ("sys ask", "ans tool more end")
    assert (a["reward"], a["calls"], a["truncated"], a["weight_versions"], a["harness"]) == (1.0, 2, 0, ["0"], "react")
    # g0 rewards [1, 0]: +-1/sqrt(2); the timed-out rollout is masked, alone in its group once the infra error left
    assert [round(r["advantage"], 5) for r in rows] == [0.70711, -0.70711, -0.70711, 1.0]
    assert (rows[1]["prompt_ids"], rows[2]["prompt_ids"], rows[2]["response_text"]) == ([1, 2], [1, 7], "more")
    assert rows[3]["loss_mask"] == [0, 0] and rows[3]["rollout_logprobs"] == [0.0, 0.0]


def test_datasets_directory_and_options(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path, config={"model": {"source": "openai-compatible"},
                                         "algo": {"advantage": "rloo"}, "trainer": {"max_seq_len": 3}})
    out = tmp_path / "ds"
    code, stdout, stderr = _export(str(run_dir), str(out), "--format", "hf", "--timeout", "drop", "--step", "0",
                                   "--json")
    assert code == 0, stderr
    assert "no tokenizer for this run's model" in stderr
    assert sorted(p.name for p in out.iterdir()) == [ARROW_FILE, "dataset_info.json", "state.json"]
    assert json.loads((out / "state.json").read_text())["_data_files"] == [{"filename": ARROW_FILE}]
    summary = json.loads(stdout)
    assert (summary["max_seq_len"], summary["step"], summary["rollouts"], summary["samples"]) == (3, 0, 2, 4)
    assert (summary["truncated_tokens"], summary["split_segments"], summary["merged"], summary["transitions"]) == (
        3, 1, 1, 2)
    rows = read_samples(out)
    # max_seq_len 3 from the run's trainer config: a's segment split at its calls; RLOO advantages of [1, 0]
    assert [(r["rollout_id"], r["prompt_ids"], r["response_ids"], r["truncated"]) for r in rows] == [
        ("a", [1, 2], [3], 0), ("a", [4], [5, 6], 3), ("b", [1, 2], [3], 0), ("b", [1, 7], [5], 0)]
    assert [r["advantage"] for r in rows] == [1.0, 1.0, -1.0, -1.0]
    assert rows[0]["prompt_text"] is None

    code, _, stderr = _export(str(run_dir), str(out), "--format", "hf")
    assert code == 2 and "is not an empty directory" in stderr


@pytest.mark.parametrize(("args", "needle"), [
    (["/nonexistent/run", "x.parquet"], "/nonexistent/run: no such run directory"),
    (["{tmp}", "x.parquet"], "is not a run directory (no results.jsonl)"),
    (["{run}", "x.parquet", "--format", "csv"], "--format 'csv': use one of parquet, hf"),
    (["{run}", "x.parquet", "--timeout", "keep"], "--timeout 'keep': use one of mask, zero, drop"),
    (["{run}", "x.parquet", "--max-seq-len", "1"], "--max-seq-len 1: must be at least 2"),
    (["{run}", "x.parquet", "--tokenizer", "/nonexistent/tok"], "--tokenizer /nonexistent/tok: no such directory"),
])
def test_bad_input_is_one_message_exit_2(tmp_path: Path, args: list[str], needle: str) -> None:
    run_dir = _run_dir(tmp_path)
    (tmp_path / "empty").mkdir()
    argv = [a.replace("{run}", str(run_dir)).replace("{tmp}", str(tmp_path / "empty")) for a in args]
    code, _, stderr = _export(*argv)
    assert code == 2 and needle in stderr and stderr.startswith("error:"), stderr
    assert not (Path.cwd() / "x.parquet").exists()
