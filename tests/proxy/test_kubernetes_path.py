"""The Kubernetes run path end to end, without a cluster: ``forge rollout runtime=kubernetes`` with the in-cluster
proxy as ``proxy.url``.

A real capture proxy process stands in for the in-cluster ``forge-proxy`` (a port-forward would put it on
loopback the same way); the recorded fake of the Kubernetes API (``tests/runtime/kube_fake.py``, the client's own
models) runs the pods, and its "container" runs the harness: it reads the base URL and key forge put in the pod's
environment, resolves the Service name to the stand-in proxy, as cluster DNS would, and makes the model call. The
test fails if forge registered the rollout on another proxy than the one the pods call (the call gets 401), if the
pods were given another proxy's address, or if the records do not come back into the run's store.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from forge_cli.config.compose import compose
from forge_cli.proxy.launcher import start_proxy
from forge_cli.rollout.run import execute
from tests.proxy.conftest import FakeUpstream, need_mitmdump
from tests.runtime.kube_fake import FakeCluster, install

pytestmark = pytest.mark.mitm
SERVICE = "http://forge-proxy.forge.svc:8800"


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCluster]:
    yield install(monkeypatch)


def test_rollouts_register_call_and_record_through_the_in_cluster_proxy(
        cluster: FakeCluster, fake_upstream: FakeUpstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    need_mitmdump()
    token = secrets.token_urlsafe(32)
    statuses: list[int] = []
    with start_proxy(fake_upstream.url, store=tmp_path / "in-cluster.sqlite", admin_token=token) as in_cluster:

        def container(pod: str, argv: list[str]) -> tuple[bytes, bytes, int] | None:
            if not any("forge-react" in a for a in argv):
                return None
            env = {e["name"]: e["value"] for e in cluster.pods[pod]["spec"]["containers"][0]["env"]}
            base, key = env["FORGE_BASE_URL"], env["FORGE_API_KEY"]
            assert base.startswith(SERVICE + "/r/"), f"the pod is sent to {base}, not the in-cluster Service"
            answer = httpx.post(base.replace(SERVICE, in_cluster.url) + "/chat/completions", timeout=30,
                                headers={"authorization": f"Bearer {key}"},
                                json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
            statuses.append(answer.status_code)
            return b"done\n", b"", 0 if answer.status_code == 200 else 1

        cluster.on_command = container
        monkeypatch.setenv("FORGE_PROXY_TOKEN", token)
        exp = compose(["runtime=kubernetes", f"proxy.url={in_cluster.url}", f"proxy.upstream={fake_upstream.url}",
                       "rollout.max_tasks=1", "rollout.samples_per_task=2", f"run.output_dir={tmp_path / 'runs'}",
                       "rollout.concurrency=2"]).experiment
        summary = execute(exp, exp.model_dump(mode="json"), quiet=True)
    assert statuses == [200, 200], "each pod's call was accepted by the proxy forge registered its key with"
    run_dir = Path(summary["run_dir"])
    results = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert len(results) == 2 and all(r["calls"] == 1 for r in results), results
    with sqlite3.connect(run_dir / "traces.sqlite") as db:
        ours = sorted(db.execute("SELECT rollout_id, prompt_token_ids, completion_token_ids FROM calls").fetchall())
    with sqlite3.connect(tmp_path / "in-cluster.sqlite") as db:
        theirs = sorted(db.execute("SELECT rollout_id, prompt_token_ids, completion_token_ids FROM calls").fetchall())
    assert ours == theirs and {r[0] for r in ours} == {r["rollout_id"] for r in results}, \
        "the in-cluster proxy's records came back into the run's store"
    pods = {c[2] for c in cluster.calls if c[0] == "create_namespaced_pod"}
    assert pods == {f"forge-{r['rollout_id']}" for r in results}, "one pod per rollout, created through the API"
