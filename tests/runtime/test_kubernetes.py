"""kubernetes backend without a cluster: golden manifests, the client's models, and the call sequence
against a recorded fake API (tests/runtime/kube_fake.py). The conformance suite covers a real cluster."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from forge_cli.config.schema import KubernetesRuntime, Resources
from forge_cli.errors import UserError
from forge_cli.runtime import kubernetes as kube
from forge_cli.runtime.base import (
    SandboxConfigError,
    SandboxError,
    SandboxGone,
    SandboxOutOfMemory,
    SandboxUnavailable,
)
from forge_cli.runtime.k8s_controller import controller_manifests
from forge_cli.runtime.k8s_manifests import cluster_manifests, network_policy, pod_manifest, replica_host
from forge_cli.runtime.spec import ProxyEndpoint, SandboxSpec
from tests.golden import check_golden
from tests.helpers import forge
from tests.runtime.conftest import run
from tests.runtime.kube_fake import FakeCluster, from_model, install, to_model

GOLDEN = Path(__file__).parent / "golden"
RUNTIME = KubernetesRuntime(kind="kubernetes", description="golden", namespace="forge", max_api_concurrency=2)
SPEC = SandboxSpec(run_id="run-1", rollout_id="run-1-task_7-s0", image="forge-base:bookworm", workdir="/work",
                   env={"OPENAI_BASE_URL": "http://forge-proxy:8800/r/run-1-task_7-s0/v1", "OPENAI_API_KEY": "k"},
                   resources=Resources(cpus=0.5, memory="1Gi", pids=256), network="proxy-only",
                   proxy=ProxyEndpoint("forge-proxy", 8800), timeout_s=900,
                   bundle_host_path="/root/.cache/forge/harnesses/codex")


def dump(docs: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False, width=120)


def test_golden_pod_and_policy() -> None:
    check_golden(GOLDEN / "pod.yaml", dump([pod_manifest(SPEC, RUNTIME)]))
    check_golden(GOLDEN / "networkpolicy.yaml", dump([network_policy(SPEC, RUNTIME)]))


def test_golden_cluster_manifests() -> None:
    check_golden(GOLDEN / "cluster.yaml", dump(cluster_manifests(RUNTIME)))
    check_golden(GOLDEN / "controller.yaml", dump(controller_manifests(RUNTIME, "rollout", ["+harness=codex"])))


MODELS = {"Namespace": "V1Namespace", "ServiceAccount": "V1ServiceAccount", "Role": "V1Role",
          "RoleBinding": "V1RoleBinding", "StatefulSet": "V1StatefulSet", "Service": "V1Service",
          "Pod": "V1Pod", "NetworkPolicy": "V1NetworkPolicy", "Job": "V1Job",
          "PersistentVolumeClaim": "V1PersistentVolumeClaim"}


def test_manifests_are_valid_client_models() -> None:
    """Every field survives a round trip through the client's models (a misspelt field would be dropped)."""
    docs = [*cluster_manifests(RUNTIME), pod_manifest(SPEC, RUNTIME), network_policy(SPEC, RUNTIME),
            *controller_manifests(RUNTIME, "eval", [])]
    for doc in docs:
        assert from_model(to_model(doc, MODELS[doc["kind"]])) == doc, doc["kind"]
    pod = pod_manifest(SPEC, RUNTIME)["spec"]
    assert pod["activeDeadlineSeconds"] == 900 and pod["automountServiceAccountToken"] is False
    sandbox = pod["containers"][0]
    assert sandbox["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert sandbox["resources"]["limits"] == {"cpu": "500m", "memory": str(1024**3)}
    assert {"name": "harness-bundle", "mountPath": "/opt/forge/harness", "readOnly": True} in sandbox["volumeMounts"]
    egress = network_policy(SPEC, RUNTIME)["spec"]["egress"]
    assert egress[0]["ports"] == [{"protocol": "TCP", "port": 8800}]
    assert egress[1] == {"to": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "forge-controller"}}}],
                         "ports": [{"protocol": "TCP", "port": 8900}]}, "pods reach the in-cluster tool server"


def test_proxy_replicas_are_a_statefulset_each_pod_sent_to_its_own() -> None:
    runtime = RUNTIME.model_copy(update={"proxy_replicas": 3})
    docs = {d["kind"]: d for d in cluster_manifests(runtime)}
    assert docs["StatefulSet"]["spec"]["replicas"] == 3
    assert docs["StatefulSet"]["spec"]["serviceName"] == "forge-proxy" == docs["Service"]["metadata"]["name"]
    assert docs["Service"]["spec"]["clusterIP"] == "None", "headless: one DNS name per replica"
    assert replica_host(runtime, 2) == "forge-proxy-2.forge-proxy.forge.svc"
    # a port-forward's loopback address is forge's way in; the pod is sent to the replica's own name
    assert kube.KubernetesSandbox.proxy_endpoint(runtime, "127.0.0.1", 8802, 2) == \
        ProxyEndpoint("forge-proxy-2.forge-proxy.forge.svc", 8800)
    # forge in the cluster uses the replicas' names itself: the pods get the same
    assert kube.KubernetesSandbox.proxy_endpoint(runtime, "forge-proxy-1.forge-proxy.forge.svc", 8800, 1) == \
        ProxyEndpoint("forge-proxy-1.forge-proxy.forge.svc", 8800)
    kube.KubernetesSandbox.check_proxy(runtime, "http://127.0.0.1:8800,http://127.0.0.1:8801,http://127.0.0.1:8802")
    for wrong in (None, "http://127.0.0.1:8800", "http://127.0.0.1:8800,http://127.0.0.1:8801"):
        with pytest.raises(UserError) as error:
            kube.KubernetesSandbox.check_proxy(runtime, wrong)
        assert error.value.exit_code == 2 and "forge-proxy-2.forge-proxy.forge.svc" in str(error.value)


def test_controller_job_runs_forge_against_the_replicas_and_serves_tools() -> None:
    runtime = RUNTIME.model_copy(update={"proxy_replicas": 2})
    docs = {d["kind"]: d for d in controller_manifests(runtime, "rollout", ["+harness=codex", "rollout.max_tasks=3"])}
    pod = docs["Job"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "forge" and pod["automountServiceAccountToken"] is True
    args = pod["containers"][0]["command"]
    assert args[:4] == ["forge", "rollout", "+harness=codex", "rollout.max_tasks=3"]
    assert ("proxy.url='http://forge-proxy-0.forge-proxy.forge.svc:8800,http://forge-proxy-1.forge-proxy.forge.svc:8800'"
            in args) and "runtime.proxy_replicas=2" in args
    assert {"tools.host=0.0.0.0", "tools.port=8900", "tools.advertise_host=forge-tools.forge.svc"} <= set(args)
    assert docs["Service"]["metadata"]["name"] == "forge-tools"
    selector = docs["Service"]["spec"]["selector"]
    assert selector == {"app.kubernetes.io/name": "forge-controller"}
    assert selector.items() <= docs["Job"]["spec"]["template"]["metadata"]["labels"].items()
    assert pod["volumes"] == [{"name": "runs", "persistentVolumeClaim": {"claimName": "forge-runs"}},
                              {"name": "harnesses", "emptyDir": {}}]
    # the harness bundles forge checks before it starts the rollouts' pods, copied from the bundles image
    init = pod["initContainers"][0]
    assert (init["image"], init["command"]) == ("forge-harness-bundles:latest", ["cp", "-R", "/bundles/.",
                                                                                 "/mnt/harnesses/"])
    assert {"name": "harnesses", "mountPath": "/home/forge/.cache/forge/harnesses"} in pod["containers"][0][
        "volumeMounts"]
    # what the Job's forge will check: its tool server is the one the pods may reach, its proxy.url the replicas
    kube.KubernetesSandbox.check_tool_server(runtime, "forge-tools.forge.svc")
    url = next(a for a in args if a.startswith("proxy.url=")).split("=", 1)[1]
    kube.KubernetesSandbox.check_proxy(runtime, url.strip("'"))
    with pytest.raises(UserError) as error:
        kube.KubernetesSandbox.check_tool_server(runtime, "127.0.0.1")
    assert error.value.exit_code == 2 and "--with-controller" in (error.value.fix or "")


def test_cli_prints_the_manifests() -> None:
    result = forge("k8s", "manifests", "--namespace", "rl")
    assert result.returncode == 0, result.stderr
    kinds = [doc["kind"] for doc in yaml.safe_load_all(result.stdout)]
    assert kinds == ["Namespace", "ServiceAccount", "ServiceAccount", "Role", "RoleBinding", "StatefulSet", "Service"]
    assert all(doc["metadata"].get("namespace", "rl") == "rl" for doc in yaml.safe_load_all(result.stdout))
    result = forge("k8s", "manifests", "--namespace", "rl", "--proxy-replicas", "2", "--with-controller",
                   "rollout.max_tasks=2")
    assert result.returncode == 0, result.stderr
    kinds = [doc["kind"] for doc in yaml.safe_load_all(result.stdout)]
    assert kinds[-3:] == ["PersistentVolumeClaim", "Job", "Service"]
    for bad in (["x=1"], ["--with-controller", "runtime=docker"], ["--with-controller", "no.such=1"],
                ["--with-controller", "--controller-command", "train"], ["--proxy-replicas", "0"]):
        result = forge("k8s", "manifests", *bad)
        assert result.returncode == 2 and "Traceback" not in result.stderr, (bad, result.stderr)


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCluster]:
    yield install(monkeypatch)


def spec(index: int = 0, **fields: Any) -> SandboxSpec:
    values: dict[str, Any] = {"run_id": "run-1", "rollout_id": f"r{index}", "image": "forge-base:bookworm",
                              "workdir": "/work", "timeout_s": 60}
    return SandboxSpec(**{**values, **fields})


def test_call_sequence(cluster: FakeCluster) -> None:
    cluster.commands["echo hi"] = (b"hi\n", b"", 0)

    async def body() -> tuple[Any, bytes]:
        async with await kube.KubernetesSandbox.create(spec(files={"task.md": "x"}), RUNTIME) as sb:
            result = await sb.exec(["echo", "hi"])
            await sb.write_file("out/ü.bin", b"\x00\xff")
            return result, await sb.read_file("out/ü.bin")

    result, data = run(body())
    assert (result.exit_code, result.stdout) == (0, "hi\n") and data == b"\x00\xff"
    assert cluster.calls == [
        ("create_namespaced_network_policy", "forge", "forge-r0"),
        ("create_namespaced_pod", "forge", "forge-r0"),
        ("read_namespaced_pod", "forge-r0"),
        ("read_namespaced_pod", "forge-r0"),
        ("exec", "write", "/work/task.md"),
        ("exec", "echo", "hi"),
        ("exec", "write", "/work/out/ü.bin"),
        ("exec", "read", "/work/out/ü.bin"),
        ("delete_namespaced_pod", "forge-r0"),
        ("read_namespaced_pod", "forge-r0"),  # 404: gone
        ("delete_namespaced_network_policy", "forge-r0"),
    ]


def test_image_problem_is_one_clear_error_and_nothing_is_left(cluster: FakeCluster) -> None:
    cluster.phases = ["Pending"]
    cluster.waiting_reason = "ErrImagePull"
    with pytest.raises(SandboxConfigError) as info:
        run(kube.KubernetesSandbox.create(spec(), RUNTIME))
    assert "ErrImagePull" in info.value.message and "kind load docker-image" in str(info.value.fix)
    assert cluster.pods == {} and cluster.policies == {}


def test_transient_errors_are_retried(cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster.failures["create_namespaced_pod"] = [503, 429]
    async def body() -> None:
        async with await kube.KubernetesSandbox.create(spec(), RUNTIME):
            pass

    run(body())
    creates = [c for c in cluster.calls if c[0] == "create_namespaced_pod"]
    assert creates == [("create_namespaced_pod", "error 503"), ("create_namespaced_pod", "error 429"),
                       ("create_namespaced_pod", "forge", "forge-r0")]


def test_permanent_errors_are_not_retried(cluster: FakeCluster) -> None:
    cluster.failures["create_namespaced_pod"] = [403, 403]
    with pytest.raises(SandboxConfigError) as info:
        run(kube.KubernetesSandbox.create(spec(), RUNTIME))
    assert "403" in info.value.message and "forge k8s manifests" in str(info.value.fix)
    assert cluster.failures["create_namespaced_pod"] == [403]


def test_api_calls_are_bounded(cluster: FakeCluster) -> None:
    cluster.delay_s = 0.02

    async def one(index: int) -> None:
        async with await kube.KubernetesSandbox.create(spec(index), RUNTIME):
            pass

    async def many() -> None:
        await asyncio.gather(*(one(i) for i in range(8)))

    run(many())
    assert cluster.max_in_flight == RUNTIME.max_api_concurrency == 2
    assert cluster.pods == {}


def test_cleanup_by_label(cluster: FakeCluster) -> None:
    async def leave() -> None:
        await kube.KubernetesSandbox.create(spec(1), RUNTIME)
        await kube.KubernetesSandbox.create(spec(2, run_id="other"), RUNTIME)

    run(leave())
    removed = run(kube.KubernetesSandbox.cleanup("run-1", RUNTIME))
    assert removed == ["forge-r1"] and list(cluster.pods) == ["forge-r2"]
    assert ("delete_collection_namespaced_network_policy", "forge", "forge.run=run-1") in cluster.calls
    # counted through the API's own label-selector lists: the run's pods and NetworkPolicies are gone, the other's kept
    assert cluster.leftovers("forge.run=run-1") == []
    assert cluster.leftovers("forge.run=other") == ["pod/forge-r2", "networkpolicy/forge-r2"]


def test_a_run_leaves_nothing_behind(cluster: FakeCluster) -> None:
    """Sandboxes that ended normally, one that failed to start, and one whose pod terminates with a grace period:
    the API holds no pod and no NetworkPolicy of the run afterwards (counted by label selector)."""
    cluster.commands["true"] = (b"", b"", 0)

    async def body() -> None:
        for index in range(3):
            async with await kube.KubernetesSandbox.create(spec(index), RUNTIME) as sb:
                await sb.exec(["true"])
        cluster.phases, cluster.waiting_reason = ["Pending"], "ImagePullBackOff"
        with pytest.raises(SandboxConfigError):
            await kube.KubernetesSandbox.create(spec(3), RUNTIME)

    run(body())
    assert cluster.leftovers("forge.run=run-1") == []
    # a pod deleted with a grace period stays (terminating) until its grace has passed
    cluster.phases, cluster.waiting_reason = ["Running"], None
    run(kube.KubernetesSandbox.create(spec(4), RUNTIME))
    cluster._delete_namespaced_pod("forge-r4", "forge", grace_period_seconds=30)
    assert cluster.leftovers("forge.run=run-1") == ["pod/forge-r4", "networkpolicy/forge-r4"]
    assert run(kube.KubernetesSandbox.cleanup("run-1", RUNTIME)) == ["forge-r4"]
    assert cluster.leftovers("forge.run=run-1") == []


def test_a_name_taken_is_409_and_nothing_of_the_other_is_touched(cluster: FakeCluster) -> None:
    async def body() -> None:
        await kube.KubernetesSandbox.create(spec(1), RUNTIME)  # left over, e.g. by a crashed forge
        await kube.KubernetesSandbox.create(spec(1), RUNTIME)

    with pytest.raises(SandboxConfigError) as info:
        run(body())
    assert "409" in info.value.message or "already exists" in info.value.message, info.value.message
    assert list(cluster.pods) == ["forge-r1"] and list(cluster.policies) == ["forge-r1"]


def test_an_init_containers_image_problem_is_reported(cluster: FakeCluster) -> None:
    """The harness bundle's init container fails to pull: its initContainerStatuses name it."""
    cluster.phases, cluster.waiting_reason = ["Pending"], "ErrImagePull"
    with pytest.raises(SandboxConfigError) as info:
        run(kube.KubernetesSandbox.create(spec(bundle_host_path="/root/.cache/forge/harnesses/codex"), RUNTIME))
    pod_spec = pod_manifest(spec(bundle_host_path="/x"), RUNTIME)["spec"]
    assert pod_spec.get("initContainers"), "the bundle comes in through an init container"
    assert f"container {pod_spec['initContainers'][0]['name']}: ErrImagePull" in info.value.message
    assert cluster.leftovers("forge.run=run-1") == []


def test_a_kill_that_fails_is_an_error_not_a_verified_rollout(cluster: FakeCluster) -> None:
    cluster.kill_exit_code = 1

    async def body() -> None:
        async with await kube.KubernetesSandbox.create(spec(), RUNTIME) as sb:
            await sb.kill_processes()

    with pytest.raises(SandboxError) as info:
        run(body())
    assert "could not all be killed before verification" in info.value.message
    assert cluster.leftovers("forge.run=run-1") == []


def test_oom_and_dead_pods(cluster: FakeCluster) -> None:
    cluster.commands["hog"] = (b"", b"Killed\n", 137)

    async def oom() -> None:
        async with await kube.KubernetesSandbox.create(spec(), RUNTIME) as sb:
            with pytest.raises(SandboxOutOfMemory):
                await sb.exec(["hog"])
            cluster.terminated_reason = "OOMKilled"
            with pytest.raises(SandboxOutOfMemory):
                await sb.exec(["hog"])
            cluster.terminated_reason = "Error"
            with pytest.raises(SandboxGone):
                await sb.exec(["hog"])

    run(oom())


def test_missing_kube_context(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nope"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(kube, "_apis", {})
    with pytest.raises(SandboxUnavailable) as info:
        run(kube.KubernetesSandbox.cleanup("x", RUNTIME))
    assert "no Kubernetes context" in info.value.message and "KUBECONFIG" in str(info.value.fix)
    result = forge("sandbox", "cleanup", "x", "-r", "kubernetes", env={"KUBECONFIG": str(tmp_path / "nope")})
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: no Kubernetes context") and "fix:" in result.stderr
