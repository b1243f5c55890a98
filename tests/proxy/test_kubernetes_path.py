"""The Kubernetes run path end to end, without a cluster: ``forge rollout runtime=kubernetes`` with the in-cluster
proxy replicas as ``proxy.url``.

Real capture proxy processes stand in for the pods of the in-cluster ``forge-proxy`` StatefulSet (port-forwards
would put them on loopback the same way); the recorded fake of the Kubernetes API (``tests/runtime/kube_fake.py``,
the client's own models) runs the pods, and its "container" runs the harness: it reads the base URL and key forge
put in the pod's environment, resolves the replica's name to its stand-in, as cluster DNS would, and makes the model
call. The test fails if forge registered the rollout on another proxy than the one the pod calls (the call gets
401), if the pods were given another address, or if the records do not come back into the run's store.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from forge_cli.config.compose import compose
from forge_cli.errors import UserError
from forge_cli.proxy.launcher import start_proxy
from forge_cli.rollout.run import execute
from tests.proxy.conftest import FakeUpstream, need_mitmdump
from tests.runtime.kube_fake import FakeCluster, install

pytestmark = pytest.mark.mitm


def replica(index: int) -> str:
    """Replica ``index`` of the in-cluster StatefulSet as a pod reaches it."""
    return f"http://forge-proxy-{index}.forge-proxy.forge.svc:8800"


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCluster]:
    yield install(monkeypatch)


@pytest.mark.parametrize("replicas", [1, 2])
def test_rollouts_register_call_and_record_through_the_in_cluster_proxy(
        cluster: FakeCluster, fake_upstream: FakeUpstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        replicas: int) -> None:
    """Each replica stands in for one pod of the proxy StatefulSet, reached by forge through its own port-forward
    (loopback): a rollout registered on replica i must be sent to replica i's in-cluster name."""
    need_mitmdump()
    token = secrets.token_urlsafe(32)
    calls: list[tuple[int, int]] = []  # (replica the pod called, status)
    with contextlib.ExitStack() as stack:
        proxies = [stack.enter_context(start_proxy(fake_upstream.url, store=tmp_path / f"in-cluster-{i}.sqlite",
                                                   admin_token=token)) for i in range(replicas)]

        def container(pod: str, argv: list[str]) -> tuple[bytes, bytes, int] | None:
            if not any("forge-react" in a for a in argv):
                return None
            env = {e["name"]: e["value"] for e in cluster.pods[pod]["spec"]["containers"][0]["env"]}
            base, key = env["FORGE_BASE_URL"], env["FORGE_API_KEY"]
            index = next((i for i in range(replicas) if base.startswith(replica(i) + "/r/")), None)
            assert index is not None, f"the pod is sent to {base}, not to a replica of the in-cluster StatefulSet"
            # cluster DNS: the replica's name reaches that replica
            answer = httpx.post(base.replace(replica(index), proxies[index].url) + "/chat/completions", timeout=30,
                                headers={"authorization": f"Bearer {key}"},
                                json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
            calls.append((index, answer.status_code))
            return b"done\n", b"", 0 if answer.status_code == 200 else 1

        cluster.on_command = container
        monkeypatch.setenv("FORGE_PROXY_TOKEN", token)
        urls = ",".join(p.url for p in proxies)
        exp = compose(["runtime=kubernetes", f"runtime.proxy_replicas={replicas}", f"proxy.url='{urls}'",
                       f"proxy.upstream={fake_upstream.url}", "rollout.max_tasks=1", "rollout.samples_per_task=4",
                       f"run.output_dir={tmp_path / 'runs'}", "rollout.concurrency=4"]).experiment
        summary = execute(exp, exp.model_dump(mode="json"), quiet=True)
    assert [status for _, status in calls] == [200] * 4, "each pod's call was accepted by the replica its key is on"
    if replicas > 1:
        assert {index for index, _ in calls} == set(range(replicas)), f"rollouts spread over the replicas: {calls}"
    run_dir = Path(summary["run_dir"])
    results = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert len(results) == 4 and all(r["calls"] == 1 for r in results), results
    with sqlite3.connect(run_dir / "traces.sqlite") as db:
        ours = sorted(db.execute("SELECT rollout_id, prompt_token_ids, completion_token_ids FROM calls").fetchall())
    theirs = []
    for i in range(replicas):
        with sqlite3.connect(tmp_path / f"in-cluster-{i}.sqlite") as db:
            theirs += db.execute("SELECT rollout_id, prompt_token_ids, completion_token_ids FROM calls").fetchall()
    assert ours == sorted(theirs) and {r[0] for r in ours} == {r["rollout_id"] for r in results}, \
        "the in-cluster proxies' records came back into the run's store"
    pods = {c[2] for c in cluster.calls if c[0] == "create_namespaced_pod"}
    assert pods == {f"forge-{r['rollout_id']}" for r in results}, "one pod per rollout, created through the API"


def test_proxy_url_must_list_every_replica(tmp_path: Path) -> None:
    exp = compose(["runtime=kubernetes", "runtime.proxy_replicas=2", "proxy.url=http://127.0.0.1:9",
                   f"run.output_dir={tmp_path}"]).experiment
    with pytest.raises(UserError) as error:
        execute(exp, exp.model_dump(mode="json"), quiet=True)
    assert error.value.exit_code == 2 and "forge-proxy-1.forge-proxy.forge.svc" in str(error.value)
    assert not any(tmp_path.iterdir()), "refused before anything started"
