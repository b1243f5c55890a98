"""The kubernetes backend through the real client stack (kubeconfig loading, REST paths, JSON, ApiException)
against a recorded API server on loopback: no cluster needed. Exec (websockets) is covered by the fake in
kube_fake.py and, on a real cluster, by the conformance suite."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from forge_cli.config.schema import KubernetesRuntime
from forge_cli.runtime import kubernetes as kube
from forge_cli.runtime.base import SandboxConfigError
from forge_cli.runtime.spec import SandboxSpec
from tests.runtime.conftest import run

PODS = "/api/v1/namespaces/forge/pods"
POLICIES = "/apis/networking.k8s.io/v1/namespaces/forge/networkpolicies"


class Recorded:
    """State and request log of the recorded API server."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.pods: dict[str, dict[str, Any]] = {}
        self.policies: dict[str, dict[str, Any]] = {}
        self.fail_next: dict[str, int] = {}
        self.waiting_reason: str | None = None


def _handler(state: Recorded) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return None

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _status(self, code: int, reason: str) -> None:
            self._send(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
                              "code": code, "message": reason})

        def _route(self, method: str) -> None:
            url = urlparse(self.path)
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            state.log.append(f"{method} {url.path}" + (f"?{url.query}" if url.query else ""))
            key = f"{method} {url.path}"
            if state.fail_next.get(key):
                state.fail_next[key] -= 1
                return self._status(503, "ServiceUnavailable")
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            selector = query.get("labelSelector", "")
            label, _, value = selector.partition("=")

            def selected(obj: dict[str, Any]) -> bool:
                return obj["metadata"].get("labels", {}).get(label) == value

            if method == "POST" and url.path == POLICIES:
                state.policies[body["metadata"]["name"]] = body
                return self._send(201, body)
            if method == "POST" and url.path == PODS:
                state.pods[body["metadata"]["name"]] = body
                return self._send(201, body)
            if url.path == PODS and method == "GET":
                return self._send(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {},
                                        "items": [p for p in state.pods.values() if selected(p)]})
            if url.path == PODS and method == "DELETE":
                for name in [n for n, p in state.pods.items() if selected(p)]:
                    del state.pods[name]
                return self._send(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": []})
            if url.path == POLICIES and method == "DELETE":
                return self._send(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})
            name = url.path.rsplit("/", 1)[-1]
            if url.path.startswith(PODS + "/"):
                if name not in state.pods:
                    return self._status(404, "NotFound")
                pod = state.pods[name]
                if method == "DELETE":
                    del state.pods[name]
                    return self._send(200, pod)
                waiting = {"waiting": {"reason": state.waiting_reason, "message": "pull access denied"}}
                status = {"phase": "Pending" if state.waiting_reason else "Running", "containerStatuses": [
                    {"name": "sandbox", "image": "x", "imageID": "", "ready": True, "restartCount": 0,
                     "state": waiting if state.waiting_reason else {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}
                return self._send(200, {**pod, "status": status})
            if url.path.startswith(POLICIES + "/") and method == "DELETE":
                state.policies.pop(name, None)
                return self._send(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})
            return self._status(404, "NotFound")

        def do_GET(self) -> None:
            self._route("GET")

        def do_POST(self) -> None:
            self._route("POST")

        def do_DELETE(self) -> None:
            self._route("DELETE")

    return Handler


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorded]:
    state = Recorded()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "recorded",
        "clusters": [{"name": "recorded", "cluster": {"server": f"http://127.0.0.1:{httpd.server_port}"}}],
        "users": [{"name": "forge", "user": {"token": "t"}}],
        "contexts": [{"name": "recorded", "context": {"cluster": "recorded", "user": "forge"}}],
    }))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.setattr(kube, "_apis", {})
    monkeypatch.setattr(kube, "api_factory", kube.KubeApis)
    monkeypatch.setattr(kube.KubernetesSandbox, "POLL_S", 0.01)
    yield state
    httpd.shutdown()


RUNTIME = KubernetesRuntime(kind="kubernetes", description="recorded", context="recorded")


def spec(rollout: str = "r1", run_id: str = "run-1") -> SandboxSpec:
    return SandboxSpec(run_id=run_id, rollout_id=rollout, image="forge-base:bookworm", workdir="/work")


def test_lifecycle_through_the_real_client(server: Recorded) -> None:
    server.fail_next[f"POST {PODS}"] = 1

    async def body() -> None:
        sandbox = await kube.KubernetesSandbox.create(spec(), RUNTIME)
        assert server.pods["forge-r1"]["spec"]["containers"][0]["image"] == "forge-base:bookworm"
        await sandbox.stop()

    run(body())
    assert server.log == [
        f"POST {POLICIES}",
        f"POST {PODS}",  # 503: retried
        f"POST {PODS}",
        f"GET {PODS}/forge-r1",
        f"DELETE {PODS}/forge-r1?gracePeriodSeconds=0",
        f"GET {PODS}/forge-r1",  # 404: gone
        f"DELETE {POLICIES}/forge-r1",
    ]
    assert server.pods == {} and server.policies == {}


def test_image_pull_failure_through_the_real_client(server: Recorded) -> None:
    server.waiting_reason = "ImagePullBackOff"
    with pytest.raises(SandboxConfigError, match="ImagePullBackOff: pull access denied"):
        run(kube.KubernetesSandbox.create(spec(), RUNTIME))
    assert server.pods == {} and server.policies == {}


def test_cleanup_through_the_real_client(server: Recorded) -> None:
    async def leave() -> None:
        await kube.KubernetesSandbox.create(spec("a"), RUNTIME)
        await kube.KubernetesSandbox.create(spec("b", run_id="other"), RUNTIME)

    run(leave())
    server.log.clear()
    assert run(kube.KubernetesSandbox.cleanup("run-1", RUNTIME)) == ["forge-a"]
    assert list(server.pods) == ["forge-b"]
    assert server.log == [
        f"GET {PODS}?labelSelector=forge.run%3Drun-1",
        f"DELETE {PODS}?gracePeriodSeconds=0&labelSelector=forge.run%3Drun-1",
        f"DELETE {POLICIES}?labelSelector=forge.run%3Drun-1",
        f"GET {PODS}?labelSelector=forge.run%3Drun-1",
    ]
