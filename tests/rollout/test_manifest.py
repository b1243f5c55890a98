"""``manifest.json``: what exactly each run was, and the warnings when two runs (or a run and its resume) differ.

Real ``forge eval`` runs with a script harness on two tasks (no policy server needed: the harness makes no model
call), so the manifest is the one a user's run writes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from forge_cli.harness.bundles import known_harnesses
from forge_cli.harness.fingerprint_diff import fingerprint_path
from forge_cli.rollout import manifest
from forge_cli.serve.prepare import MANIFEST as MODEL_MANIFEST
from forge_cli.serve.prepare import default_model_dir
from tests.eval.test_eval_cli import SOLVER, TWO_TASKS, _eval, _tasks
from tests.helpers import forge
from tests.rollout.test_rollout_run import NO_UPSTREAM, _script_harness


def _run(tmp_path: Path, *extra: str) -> Path:
    config_dir = _script_harness(tmp_path, "solver", SOLVER)
    runs = tmp_path / "runs"
    before = set(runs.iterdir()) if runs.is_dir() else set()
    code, _report, stderr = _eval(tmp_path, "+harness=solver", NO_UPSTREAM, "proxy.port=0",
                                  f"env.path={_tasks(tmp_path, TWO_TASKS)}", f"run.output_dir={runs}", *extra,
                                  config_dir=config_dir)
    assert code == 0, stderr
    (new,) = set(runs.iterdir()) - before
    return new


def test_every_run_records_what_ran_and_compare_warns(tmp_path: Path) -> None:
    first = _run(tmp_path)
    got = manifest.read(first)
    assert got is not None
    assert got["forge"]["version"] and got["python"] and got["seeds"] == {"run.seed": 0,
                                                                         "rollout.sampling.seed": None}
    assert got["harness"]["name"] == "solver" and got["harness"]["fingerprint_sha256"] is None  # none committed
    host = got["machine"]
    assert host["cores"] >= 1 and isinstance(host["bf16"], bool) and host["memory_gib"] > 0
    assert isinstance(host["gpus"], list)
    assert got["environments"]["forge"]["packages"] > 10 and len(got["environments"]["forge"]["sha256"]) == 64
    if (manifest.REPO / ".git").exists():
        assert len(got["forge"]["git"]["revision"]) == 40
    files = json.loads((default_model_dir() / MODEL_MANIFEST).read_text())["files"]
    assert got["model"]["content_sha256"] == hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
    # a second run with another seed: --compare shows both results and warns what differs in what ran
    second = _run(tmp_path, "run.seed=7")
    result = forge("eval", "--compare", str(first), str(second), timeout=300)
    assert result.returncode == 0, result.stderr
    assert "the two runs differ in what ran" in result.stderr and "seeds.run.seed: 0 -> 7" in result.stderr
    same = forge("eval", "--compare", str(first), str(first), timeout=300)
    assert "differ in what ran" not in same.stderr


def test_a_resume_with_something_else_warns(tmp_path: Path) -> None:
    run_dir = _run(tmp_path)
    saved = json.loads((run_dir / manifest.MANIFEST).read_text())
    saved["harness"]["version"] = "0.0.1"  # as if the harness had been upgraded since
    (run_dir / manifest.MANIFEST).write_text(json.dumps(saved))
    (run_dir / "results.jsonl").write_text("")  # as if interrupted before any trial ended: --resume reruns them
    code, _report, stderr = _eval(tmp_path, "--resume", str(run_dir), config_dir=None)
    assert code == 0, stderr
    assert "continues with something else than it started with" in stderr and "harness.version: 0.0.1" in stderr


def test_differences_of_runs_written_before_manifests() -> None:
    assert manifest.differences(None, None) == []
    assert manifest.differences({"a": 1}, None) == [
        "manifest.json: only one of the runs has one (written since forge records it)"]
    assert manifest.differences({"a": {"b": 1}}, {"a": {"b": 2}, "c": 3}) == ["a.b: 1 -> 2", "c: None -> 3"]


def test_the_machine_a_run_ran_on(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f avx512_bf16\n\n"
                       "processor\t: 1\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f avx512_bf16\n")
    model, flags = manifest._cpuinfo(cpuinfo)
    assert model == "AMD EPYC" and "avx512_bf16" in flags
    assert manifest._cpuinfo(tmp_path / "absent") == (None, set())
    # a run on a bf16 machine compared with one on an AVX2-only machine: the difference is named
    a = {"machine": {"cpu": "AMD EPYC", "bf16": True}}
    b = {"machine": {"cpu": "AMD EPYC", "bf16": False}}
    assert manifest.differences(a, b) == ["machine.bf16: True -> False"]


def test_the_manifest_names_the_harness_fingerprint() -> None:
    path = fingerprint_path(known_harnesses()["pi"])
    assert manifest._fingerprint("pi") == hashlib.sha256(path.read_bytes()).hexdigest()
    assert manifest._fingerprint("no-such-harness") is None
