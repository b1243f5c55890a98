"""Capture proxy replicas (``proxy.replicas``, ``forge_cli/proxy/shards.py``): rollouts spread over them, one
replica killed with SIGKILL mid-run takes down only its own rollouts (infra errors), the run finishes on the
others, and every recorded call reaches the run's store (the dead replica's committed rows from its file)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from forge_cli.config.compose import compose
from forge_cli.proxy.client import ProxyUnreachable
from forge_cli.rollout.services import local_replicas
from tests.helpers import REPO
from tests.proxy.conftest import FakeUpstream, need_mitmdump

pytestmark = pytest.mark.mitm


def _chat(base_url: str, key: str) -> None:
    answer = httpx.post(f"{base_url}/v1/chat/completions", headers={"authorization": f"Bearer {key}"}, timeout=30,
                        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert answer.status_code == 200, answer.text


def test_spread_kill_and_nothing_lost(fake_upstream: FakeUpstream, tmp_path: Path) -> None:
    need_mitmdump()
    exp = compose(["proxy.replicas=3", "proxy.port=0"]).experiment
    store = tmp_path / "traces.sqlite"
    with local_replicas(exp, fake_upstream.url, store, None) as sharded:
        answers = [sharded.register(f"r-{i}", task="t") for i in range(6)]
        assert Counter(a["sandbox_url"] for a in answers).most_common() == [
            (r.endpoint.url, 2) for r in sharded.replicas], "two rollouts on each replica"
        for a in answers:
            _chat(a["base_url"], a["key"])
        victim = sharded.replicas[1]
        handle_pid = _pid_listening(urlsplit(victim.client.url).port or 0)
        os.kill(handle_pid, signal.SIGKILL)
        time.sleep(2)  # its writer commits what it had and exits
        sharded.set_weight_version("7")  # the live replicas take it; the dead one is marked
        lost = []
        for a in answers:
            rid = str(a["rollout_id"])
            try:
                sharded.calls(rid)
                sharded.finish(rid, "ok")
            except ProxyUnreachable:
                lost.append(rid)
                with pytest.raises(ProxyUnreachable):
                    sharded.finish(rid, "ok")
        assert sorted(lost) == sorted(str(a["rollout_id"]) for a in answers if a["sandbox_url"] ==
                                      victim.endpoint.url)
        later = sharded.register("r-late", task="t")
        assert later["sandbox_url"] != victim.endpoint.url, "no new rollout on the dead replica"
        sharded.finish("r-late")
    with sqlite3.connect(store) as db:
        counts = dict(db.execute("SELECT rollout_id, COUNT(*) FROM calls GROUP BY rollout_id").fetchall())
    assert counts == {f"r-{i}": 1 for i in range(6)}, "every recorded call is in the run's store"
    assert not list((tmp_path / "proxy").glob("replica-*.sqlite")), "copied replica stores are removed"


def _pid_listening(port: int) -> int:
    """The capture proxy process serving ``port`` (its command line names the port)."""
    out = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if "forge_cli.remote.mitmproxy.main" in line and f":{port}" in line:
            return int(line.split()[0])
    raise AssertionError(f"no proxy process for port {port}")


HARNESS = r'''
import json, sys, time, urllib.request
base, key, marks = sys.argv[1], sys.argv[2], sys.argv[3]
def chat():
    req = urllib.request.Request(base + "/chat/completions", method="POST", headers={
        "authorization": "Bearer " + key, "content-type": "application/json"},
        data=json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode())
    urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=30).read()
chat()
open(f"{marks}/{time.monotonic_ns()}", "w").write(base)
time.sleep(6)
chat()
'''


def test_forge_rollout_survives_a_replica_killed_mid_run(fake_upstream: FakeUpstream, tmp_path: Path) -> None:
    need_mitmdump()
    marks = tmp_path / "marks"
    marks.mkdir()
    script = tmp_path / "harness.py"
    script.write_text(HARNESS)
    args = [sys.executable, "-m", "forge_cli", "rollout", "--json", f"run.output_dir={tmp_path / 'runs'}",
            "proxy.replicas=3", "proxy.port=0", f"proxy.upstream={fake_upstream.url}", "rollout.max_tasks=6",
            "rollout.samples_per_task=1", "rollout.concurrency=6", "runtime.isolation=none",
            f'harness.command=[python3,{script},"{{{{base_url}}}}","{{{{api_key}}}}",{marks}]']
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while len(list(marks.iterdir())) < 6 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        urls = [p.read_text() for p in marks.iterdir()]
        assert len(urls) == 6, proc.stderr.read() if proc.poll() is not None and proc.stderr else urls
        ports = Counter(urlsplit(u).port for u in urls)
        assert len(ports) == 3, f"rollouts spread over the three replicas: {ports}"
        victim = sorted(ports)[0]
        os.kill(_pid_listening(int(victim or 0)), signal.SIGKILL)
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    run_dir = Path(json.loads(out)["run_dir"])
    results = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert len(results) == 6
    with sqlite3.connect(run_dir / "traces.sqlite") as db:
        rows = db.execute("SELECT rollout_id, path FROM calls").fetchall()
    on_victim = {r["rollout_id"] for r in results if r["status"] == "infra_error"}
    assert len(on_victim) == ports[victim], f"the dead replica's rollouts are infra errors: {results}"
    assert all("capture proxy stopped answering" in (r["error"] or "") for r in results
               if r["rollout_id"] in on_victim)
    others = [r for r in results if r["rollout_id"] not in on_victim]
    assert all(r["status"] != "infra_error" and r["calls"] == 2 for r in others), others
    recorded = Counter(rid for rid, _ in rows)
    assert all(recorded[r["rollout_id"]] == 2 for r in others), "the live replicas' calls are all in the run store"
    assert all(recorded[rid] >= 1 for rid in on_victim), "the dead replica's first calls were copied from its file"


def test_replica_count_and_url_checks_exit_2(tmp_path: Path) -> None:
    from tests.helpers import forge

    for args, needle in ((["proxy.replicas=0"], "proxy.replicas"),
                         (["proxy.replicas=2", "proxy.url=http://127.0.0.1:9"], "list the replicas' URLs"),
                         (["proxy.url=http://127.0.0.1:9,notaurl"], "notaurl")):
        result = forge("rollout", "--dry-run", f"run.output_dir={tmp_path}", *args)
        assert result.returncode == 2, result.stderr
        assert needle in result.stderr and "Traceback" not in result.stderr
    plan = forge("rollout", "--dry-run", "proxy.replicas=3", f"run.output_dir={tmp_path}")
    assert plan.returncode == 0 and "3 local replicas" in plan.stdout
