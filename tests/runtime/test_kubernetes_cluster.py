"""A real ``forge rollout runtime=kubernetes`` on a real cluster: pods, the in-cluster proxy replicas, records back.

Runs when ``KUBECONFIG`` points at a cluster prepared as docs/sandboxes.md says and
``FORGE_TEST_PROXY_URL`` names its proxy replicas as this machine reaches them (port-forwards), with
``FORGE_PROXY_TOKEN`` set to the ``forge-proxy-token`` Secret's token; skipped with that reason otherwise (no
cluster runs on forge's CI machines: there the same path runs against the recorded API server,
tests/proxy/test_kubernetes_path.py). With kind::

    kind create cluster --name forge && kind load docker-image forge-base:bookworm forge:latest --name forge
    kubectl -n forge create secret generic forge-proxy-token --from-literal=token=$FORGE_PROXY_TOKEN
    .venv/bin/forge k8s manifests --proxy-upstream http://<a policy server pods reach>:8000 | kubectl apply -f -
    kubectl -n forge port-forward pod/forge-proxy-0 8800:8800 &
    KUBECONFIG=$HOME/.kube/config FORGE_TEST_PROXY_URL=http://127.0.0.1:8800 .venv/bin/pytest \\
        tests/runtime/test_kubernetes_cluster.py

``FORGE_TEST_NAMESPACE`` (default forge) and ``FORGE_TEST_IMAGE`` (default forge-base:bookworm) as for the
conformance suite.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from forge_cli.config.compose import compose
from forge_cli.config.schema import upstream_urls
from forge_cli.rollout.run import execute

# KUBECONFIG, FORGE_TEST_PROXY_URL (the proxy replicas, port-forwarded) and FORGE_PROXY_TOKEN (see the docstring)
pytestmark = pytest.mark.requires("kubernetes-proxy")


def test_a_rollout_runs_in_a_pod_and_its_records_come_back(tmp_path: Path) -> None:
    urls = os.environ["FORGE_TEST_PROXY_URL"]
    exp = compose(["runtime=kubernetes", f"runtime.namespace={os.environ.get('FORGE_TEST_NAMESPACE', 'forge')}",
                   f"runtime.proxy_replicas={len(upstream_urls(urls))}", f"proxy.url='{urls}'",
                   f"env.image={os.environ.get('FORGE_TEST_IMAGE', 'forge-base:bookworm')}",
                   "rollout.max_tasks=1", "rollout.samples_per_task=1", f"run.output_dir={tmp_path}"]).experiment
    summary = execute(exp, exp.model_dump(mode="json"), quiet=True)
    run_dir = Path(summary["run_dir"])
    results = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert len(results) == 1 and results[0]["status"] != "infra_error", results
    assert results[0]["calls"] >= 1, "the harness in the pod called the in-cluster proxy"
    with sqlite3.connect(run_dir / "traces.sqlite") as db:
        rows = db.execute("SELECT rollout_id, completion_token_ids FROM calls").fetchall()
    assert {r[0] for r in rows} == {results[0]["rollout_id"]} and all(r[1] for r in rows), \
        "the pod's calls were recorded by the in-cluster proxy, token ids included, and pulled into the run's store"
