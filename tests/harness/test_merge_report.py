"""benchmarks/merge_report.py on run directories written through the real trace store: the merge share per
harness (next prompt starts with previous prompt + completion, as forge's sample builder decides it), segments,
the baseline column, --json."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from forge_cli.traces.record import CallRecord
from forge_cli.traces.store import CALL_FIELDS, insert_calls, open_store, upsert_rollout

ROOT = Path(__file__).resolve().parents[2]


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("merge_report", ROOT / "benchmarks" / "merge_report.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["merge_report"] = module
    spec.loader.exec_module(module)
    return module


mr = _module()


def _run_dir(tmp_path: Path, name: str, harness: str, rollouts: dict[str, list[tuple[list[int], list[int]]]],
             wire: str = "chat") -> Path:
    run_dir = tmp_path / name
    conn = open_store(run_dir / "traces.sqlite")
    for rid, calls in rollouts.items():
        upsert_rollout(conn, {"rollout_id": rid, "harness": harness, "created": 0.0})
        rows = []
        for seq, (prompt, completion) in enumerate(calls):
            record = CallRecord(rollout_id=rid, seq=seq, wire_format=wire, status="ok" if prompt else "upstream_error",
                                prompt_token_ids=prompt or None, completion_token_ids=completion or None,
                                completion_logprobs=[-0.5] * len(completion) if prompt else None)
            data = record.to_dict()
            rows.append(tuple(json.dumps(data[f]) if f in ("prompt_token_ids", "completion_token_ids",
                                                            "completion_logprobs")
                              and data[f] is not None else data[f] for f in CALL_FIELDS))
        insert_calls(conn, rows)
    conn.commit()
    conn.close()
    (run_dir / "summary.json").write_text(json.dumps({"harness": harness}))
    return run_dir


def test_merge_share_segments_and_baseline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # react: append-only, 3 calls that each extend the previous one
    react = _run_dir(tmp_path, "react", "react", {
        "r0": [([1, 2], [3]), ([1, 2, 3, 4], [5]), ([1, 2, 3, 4, 5, 6], [7])]})
    # other: one extension, one rewrite that keeps the previous prompt only, one fresh start (title call
    # first), and a failed call without ids: skipped, so the call after it still extends the one before it
    other = _run_dir(tmp_path, "other", "other", {
        "o0": [([9], [8]), ([1, 2], [3]), ([1, 2, 3, 6], [4]), ([1, 2, 3, 6, 9], [5])],
        "o1": [([1], [2]), ([], []), ([1, 2, 3], [4])]}, wire="responses")
    stats = mr.analyse([react, other])
    react_stats = stats["react"].stats
    assert stats["react"].merge_share == 1.0 and react_stats.segments == 1 and react_stats.trainable == 3
    st, figures = stats["other"], stats["other"].stats
    assert (st.rollouts, figures.calls, figures.trainable, figures.transitions) == (2, 7, 6, 4)
    assert figures.merged == 2 and figures.prompt_prefix == 3 and figures.segments == 4
    assert figures.reasons == {"first": 2, "merged": 2, "prefix-mismatch": 2, "not-ok": 1}
    assert st.wire_formats == {"responses"}
    assert st.multi_call == 2 and st.per_rollout == [(4, 3, 1, 3), (2, 1, 1, 1)]
    assert dict(st.breaks) == {"the prompt leaves the previous prompt (no messages recorded to say how)": 1,
                               "history kept, the previous answer re-rendered otherwise (no messages recorded to "
                               "say how)": 1}
    low, high = st.merge_interval()
    assert low <= 0.5 <= high and low >= 0.0 and high <= 1.0

    out = tmp_path / "report.json"
    assert mr.main([str(react), str(other), "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "baseline" in table and "-50 pts" in table and "50% (" in table and "6 (+1 not trainable)" in table
    assert "what breaks the merge" in table and "other: 1 x history kept" in table
    saved = json.loads(out.read_text())["other"]
    assert saved["merge_share"] == pytest.approx(1 / 2) and saved["multi_call_rollouts"] == 2
    assert saved["segments_per_rollout"] == 2.0 and len(saved["segments_per_rollout_ci"]) == 2


def test_without_the_baseline_harness_the_table_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _run_dir(tmp_path, "solo", "pi", {"p0": [([1], [2])]})
    assert mr.main([str(run)]) == 0
    out = capsys.readouterr().out
    assert "n/a" in out and "no 'react' rollouts" in out


def test_not_a_run_directory(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"no traces\.sqlite"):
        mr.main([str(tmp_path)])


def test_every_harness_run_failing_is_exit_1_not_a_usage_error(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    # a real `forge rollout` per harness; an unknown harness exits before any server is reached
    code = mr.main(["--run", "--harnesses", "no-such-harness", "--upstream", "http://127.0.0.1:9",
                    "--output-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1
    assert "no-such-harness: forge rollout failed (exit 2)" in err
    assert "no harness run finished" in err and "give run directories" not in err


def _call(seq: int, prompt: list[int], messages: list[dict[str, str]], tools: list[str] | None = None,
          answer: str = "a", finish: str = "stop") -> CallRecord:
    return CallRecord(rollout_id="r", seq=seq, wire_format="chat", status="ok", prompt_token_ids=prompt,
                      completion_token_ids=[0], completion_logprobs=[-0.1], finish_reason=finish,
                      request={"messages": messages, **({"tools": tools} if tools else {})},
                      response={"choices": [{"index": 0, "message": {"role": "assistant", "content": answer},
                                             "finish_reason": finish}]})


def test_break_causes_read_the_ids_then_the_forwarded_messages() -> None:
    system, user, answer = ({"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                            {"role": "assistant", "content": "a"})
    first = _call(0, [1, 2], [system, user])
    assert mr.break_cause(first, _call(1, [1, 2], [system, user])).startswith("the same prompt sent again")
    extended = [system, user, answer, {"role": "user", "content": "next"}]
    assert "same content in other ids (no tokenizer" in mr.break_cause(first, _call(1, [1, 2, 9], extended))
    # with the tokenizer: the same text again in other ids, or the content written in another form
    def decode(ids: list[int]) -> str:
        return "".join({0: "ab", 9: "a", 8: "b"}.get(i, "?") for i in ids)

    assert "same text re-tokenized" in mr.break_cause(first, _call(1, [1, 2, 9, 8, 3], extended), decode)
    assert "another form by the chat template" in mr.break_cause(first, _call(1, [1, 2, 9, 3], extended), decode)
    cut = _call(0, [1, 2], [system, user], finish="length")
    assert "cut at the output limit, re-rendered closed" in mr.break_cause(cut, _call(1, [1, 2, 9], extended))
    other = _call(0, [1, 2], [system, user], answer="a, said otherwise")
    assert "sent the previous answer back with other text" in mr.break_cause(other, _call(1, [1, 2, 9], extended))
    title = _call(1, [7], [{"role": "system", "content": "make a title"}, user])
    assert mr.break_cause(first, title).startswith("another system prompt or tool list")
    assert mr.break_cause(first, _call(1, [1, 5], [system, user], tools=["bash"])).startswith("another system")
    rewritten = _call(1, [1, 3], [system, {"role": "user", "content": "error: no tool call"}])
    assert mr.break_cause(first, rewritten).startswith("earlier messages changed or removed")
    assert mr.break_cause(first, _call(1, [1, 4], [system, user, answer])).startswith("the same messages")
