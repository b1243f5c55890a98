"""The kubernetes backend through the real client stack (kubeconfig loading, REST paths, JSON, ApiException,
the exec websocket with its channel protocol) against a recorded API server on loopback: no cluster needed.
A real cluster runs the conformance suite instead (tests/runtime/conftest.py)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import WSMsgType, web

from forge_cli.config.schema import KubernetesRuntime
from forge_cli.runtime import kubernetes as kube
from forge_cli.runtime.base import SandboxConfigError
from forge_cli.runtime.spec import SandboxSpec
from tests.runtime.conftest import run
from tests.runtime.kube_fake import FakeCluster

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
        # emulates the container behind exec: files and canned command results
        self.container = FakeCluster()


def _json(status: int, body: dict[str, Any]) -> web.Response:
    return web.json_response(body, status=status)


def _status(code: int, reason: str) -> web.Response:
    return _json(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code,
                        "message": reason})


def _app(state: Recorded) -> web.Application:
    async def exec_ws(request: web.Request) -> web.WebSocketResponse:
        """The exec subresource over websocket, channel protocol v4 (as the real client negotiates it)."""
        ws = web.WebSocketResponse(protocols=["v4.channel.k8s.io"])
        await ws.prepare(request)
        argv = request.query.getall("command")
        state.log.append("EXEC " + " ".join(argv[:2]))
        stdin = b""
        if request.query.get("stdin", "").lower() == "true":
            size = int(argv[5])
            while len(stdin) < size:
                message = await ws.receive()
                assert message.type == WSMsgType.BINARY and message.data[0] == 0, message
                stdin += message.data[1:]
        out, err, code = state.container.run_in_container(argv, stdin)
        if out:
            await ws.send_bytes(b"\x01" + out)
        if err:
            await ws.send_bytes(b"\x02" + err)
        status: dict[str, Any] = {"metadata": {}, "status": "Success"}
        if code:
            status = {"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode", "message": f"exit {code}",
                      "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}
        await ws.send_bytes(b"\x03" + json.dumps(status).encode())
        await ws.close()
        return ws

    async def route(request: web.Request) -> web.StreamResponse:
        path, method = request.path, request.method
        if path.endswith("/exec"):
            return await exec_ws(request)
        state.log.append(f"{method} {path}" + (f"?{request.query_string}" if request.query_string else ""))
        key = f"{method} {path}"
        if state.fail_next.get(key):
            state.fail_next[key] -= 1
            return _status(503, "ServiceUnavailable")
        body: dict[str, Any] = await request.json() if request.can_read_body else {}
        label, _, value = request.query.get("labelSelector", "").partition("=")

        def selected(obj: dict[str, Any]) -> bool:
            return bool(obj["metadata"].get("labels", {}).get(label) == value)

        if method == "POST" and path == POLICIES:
            state.policies[body["metadata"]["name"]] = body
            return _json(201, body)
        if method == "POST" and path == PODS:
            state.pods[body["metadata"]["name"]] = body
            return _json(201, body)
        if path == PODS and method == "GET":
            return _json(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {},
                               "items": [p for p in state.pods.values() if selected(p)]})
        if path == PODS and method == "DELETE":
            for name in [n for n, p in state.pods.items() if selected(p)]:
                del state.pods[name]
            return _json(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": []})
        if path == POLICIES and method == "DELETE":
            return _json(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})
        name = path.rsplit("/", 1)[-1]
        if path.startswith(PODS + "/"):
            if name not in state.pods:
                return _status(404, "NotFound")
            pod = state.pods[name]
            if method == "DELETE":
                del state.pods[name]
                return _json(200, pod)
            waiting = {"waiting": {"reason": state.waiting_reason, "message": "pull access denied"}}
            running = {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
            status = {"phase": "Pending" if state.waiting_reason else "Running", "containerStatuses": [
                {"name": "sandbox", "image": "x", "imageID": "", "ready": True, "restartCount": 0,
                 "state": waiting if state.waiting_reason else running}]}
            return _json(200, {**pod, "status": status})
        if path.startswith(POLICIES + "/") and method == "DELETE":
            state.policies.pop(name, None)
            return _json(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})
        return _status(404, "NotFound")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", route)
    return app


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorded]:
    state = Recorded()
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(_app(state))
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "recorded",
        "clusters": [{"name": "recorded", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "forge", "user": {"token": "t"}}],
        "contexts": [{"name": "recorded", "context": {"cluster": "recorded", "user": "forge"}}],
    }))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.setattr(kube, "_apis", {})
    monkeypatch.setattr(kube, "api_factory", kube.KubeApis)
    monkeypatch.setattr(kube.KubernetesSandbox, "POLL_S", 0.01)
    yield state
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


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


def test_exec_and_files_over_the_real_websocket(server: Recorded) -> None:
    server.container.commands["echo hi"] = (b"hi\n", b"warn\n", 0)
    server.container.commands["false"] = (b"", b"", 1)
    blob = bytes(range(256)) * 64

    async def body() -> tuple[Any, Any, bytes]:
        async with await kube.KubernetesSandbox.create(spec(), RUNTIME) as sb:
            ok = await sb.exec(["echo", "hi"])
            failed = await sb.exec(["false"])
            await sb.write_file("data/ü.bin", blob)
            with pytest.raises(FileNotFoundError):
                await sb.read_file("missing")
            return ok, failed, await sb.read_file("data/ü.bin")

    ok, failed, data = run(body())
    assert (ok.exit_code, ok.stdout, ok.stderr) == (0, "hi\n", "warn\n")
    assert failed.exit_code == 1
    assert data == blob
    assert [line for line in server.log if line.startswith("EXEC")] == ["EXEC /bin/sh -c"] * 5
