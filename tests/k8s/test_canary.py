"""``forge k8s check`` (and ``forge doctor --live``), the live canary for a user's cluster, against the API-server fake
of tests/runtime/kube_fake.py: the healthy cluster, each failure class reported with its fix (RBAC refused, image pull
error, egress not blocked, proxy unreachable), nothing left behind in every case (counted by label selector), and bad
input as one message with exit 2. The fake's "container" answers the canary's commands as a scripted pod does: it
cannot run a harness, so the rollout step is checked as reported "not run" here, and its judgement with forge's run
stubbed."""

from __future__ import annotations

import json
import secrets
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes.client.exceptions import ApiException

from forge_cli.cli.app import main
from forge_cli.config.schema import KubernetesRuntime
from forge_cli.proxy.launcher import start_proxy
from forge_cli.runtime import kubernetes as kube
from forge_cli.runtime.k8s_canary import EXEC_CHECK, PROBE_SH, Canary, Step
from tests.proxy.conftest import FakeUpstream, need_mitmdump
from tests.runtime.kube_fake import FakeCluster, install

HEALTH = {"ok": True, "upstreams": [{"url": "http://forge-policy:8000", "healthy": True, "rollouts": 0}]}
PROXY_HOST = "forge-proxy-0.forge-proxy.forge.svc"


class Pod:
    """What the canary's commands print in a healthy pod; a test changes one answer to make a failure."""

    def __init__(self) -> None:
        self.egress = b"closed timed out\n"
        self.proxy = b"http 200 " + json.dumps(HEALTH).encode() + b"\n"
        self.probed: list[tuple[str, str, str]] = []

    def __call__(self, pod: str, command: list[str]) -> tuple[bytes, bytes, int] | None:
        if command == EXEC_CHECK:
            return b"forge-canary 42\n", b"", 0
        if command[:3] == ["sh", "-c", PROBE_SH]:
            mode, host, port = command[4:7]
            self.probed.append((mode, host, port))
            return (self.proxy if mode == "http" else self.egress), b"", 0
        return None


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> FakeCluster:
    fake = install(monkeypatch)
    fake.namespaces = {"forge"}
    fake.on_command = Pod()
    return fake


def pod(cluster: FakeCluster) -> Pod:
    assert isinstance(cluster.on_command, Pod)
    return cluster.on_command


def forge(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The CLI in this process (so that it talks to the fake), as ``forge ARGS`` would run: exit code, out, err."""
    monkeypatch.setattr(sys, "argv", ["forge", *args])
    with pytest.raises(SystemExit) as exit_:
        main()
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    code = exit_.value.code
    return (code if isinstance(code, int) else 0), out, err


def lines(out: str) -> dict[str, str]:
    """Each step's first line by step name: 'ok', 'FAILED' or 'not run' and the detail."""
    found: dict[str, str] = {}
    for line in out.splitlines():
        for status in ("ok", "FAILED", "not run"):
            if line.startswith(status + " ") and ":" in line:
                name = line[len(status):].strip().split(":", 1)[0]
                found.setdefault(name, f"{status}:{line.split(':', 1)[1]}")
    return found


def nothing_left(cluster: FakeCluster) -> None:
    assert cluster.leftovers("forge.canary") == [], "the canary left objects behind"
    assert cluster.pods == {} and cluster.policies == {}


def test_healthy_cluster_every_step_ok_and_nothing_left(cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = forge(monkeypatch, capsys, "k8s", "check")
    steps = lines(out)
    assert code == 0, out + err
    assert list(steps) == ["api", "rbac", "pod-security", "pod", "exec", "egress", "proxy", "rollout", "cleanup"]
    for name in ("api", "rbac", "pod-security", "pod", "exec", "egress", "proxy", "cleanup"):
        assert steps[name].startswith("ok:"), steps[name]
    # the fake cannot run a harness: the rollout is reported as not run, with what it needs, never as ok
    assert steps["rollout"].startswith("not run:") and "proxy.url" in steps["rollout"]
    assert "healthy" in steps["proxy"] and "blocked" in steps["egress"]
    created = [c for c in cluster.calls if c[0] in ("create_namespaced_pod", "create_namespaced_network_policy")]
    assert len(created) == 2, "one pod and its NetworkPolicy, through the backend"
    assert [p[:2] for p in pod(cluster).probed] == [("tcp", "kubernetes.default.svc"), ("http", PROXY_HOST)]
    reviews = [c for c in cluster.calls if c[0] == "create_self_subject_access_review"]
    assert ("create_self_subject_access_review", "create", "pods/exec") in reviews
    nothing_left(cluster)


ENFORCE = "pod-security.kubernetes.io/enforce"


def test_the_namespaces_pod_security_level_against_the_sandboxes(cluster: FakeCluster,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = forge(monkeypatch, capsys, "k8s", "check")
    assert code == 0 and "enforces no Pod Security level; forge's pods meet restricted" in lines(out)["pod-security"]
    cluster.namespace_labels["forge"] = {ENFORCE: "restricted"}
    code, out, _ = forge(monkeypatch, capsys, "k8s", "check")
    assert code == 0 and "enforces restricted; forge's sandbox pods meet restricted" in lines(out)["pod-security"]
    # sandboxes as their image's user (root) where the namespace enforces restricted: every pod would be refused
    cluster.calls.clear()
    code, out, err = forge(monkeypatch, capsys, "k8s", "check", "runtime.pod_security=baseline")
    steps = lines(out)
    assert code == 1, out + err
    assert steps["pod-security"].startswith("FAILED:") and "runtime.pod_security=baseline" in steps["pod-security"]
    assert f"kubectl label namespace forge {ENFORCE}=baseline --overwrite" in out
    assert all(steps[s].startswith("not run:") for s in ("pod", "exec", "egress", "proxy", "rollout"))
    assert not any(c[0] == "create_namespaced_pod" for c in cluster.calls), "nothing created after the refusal"
    nothing_left(cluster)


def test_json_report(cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch,
                     capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = forge(monkeypatch, capsys, "k8s", "check", "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"] is True and report["failed"] == [] and report["not_run"] == ["rollout"]
    assert report["run"].startswith("canary-")
    assert {s["name"]: s["status"] for s in report["steps"]}["cleanup"] == "ok"
    nothing_left(cluster)


def test_rbac_refused_names_the_verb_and_the_role(cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    cluster.forbidden = {("create", "pods/exec"), ("deletecollection", "networkpolicies")}
    code, out, err = forge(monkeypatch, capsys, "k8s", "check")
    steps = lines(out)
    assert code == 1, out + err
    assert steps["rbac"].startswith("FAILED:") and "RBAC refused: create pods/exec, deletecollection " \
        "networkpolicies in namespace forge" in steps["rbac"]
    assert "forge k8s manifests | kubectl apply -f -" in out and "create rolebinding" in out
    assert all(steps[s].startswith("not run:") for s in ("pod", "exec", "egress", "proxy", "rollout"))
    assert not any(c[0] == "create_namespaced_pod" for c in cluster.calls), "nothing created after a refusal"
    assert "error: the cluster check failed at: rbac" in err
    nothing_left(cluster)


def test_a_refusal_the_access_review_missed_is_still_rbac(cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """No access review answered (403 on the review itself): the pod's own 403 names RBAC, and the NetworkPolicy
    created before it is removed."""
    cluster.failures["create_self_subject_access_review"] = [403]
    cluster.forbidden = {("create", "pods")}
    code, out, _ = forge(monkeypatch, capsys, "k8s", "check")
    steps = lines(out)
    assert code == 1
    assert steps["rbac"].startswith("not run:")
    assert steps["pod"].startswith("FAILED: RBAC refused creating the pod") and "create rolebinding" in out
    assert steps["cleanup"].startswith("ok:")
    nothing_left(cluster)


def test_image_pull_error_names_the_bundle_image(cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    cluster.phases = ["Pending"]
    cluster.waiting_reason = "ErrImagePull"
    code, out, _ = forge(monkeypatch, capsys, "k8s", "check")
    steps = lines(out)
    assert code == 1
    assert steps["pod"].startswith("FAILED: image pull error: the cluster cannot pull forge-harness-bundles:latest")
    assert "set runtime.bundle_image" in out and "imagePullSecret" in out
    assert all(steps[s].startswith("not run:") for s in ("exec", "egress", "proxy", "rollout"))
    nothing_left(cluster)


def run_canary(cluster: FakeCluster, **fields: Any) -> list[Step]:
    runtime = KubernetesRuntime(kind="kubernetes", description="test")
    return Canary(runtime, "registry.example/forge-base:bookworm", egress_target="kubernetes.default.svc:443",
                  **fields).run()


def test_image_pull_backoff_names_the_sandbox_image(cluster: FakeCluster) -> None:
    cluster.phases = ["Pending"]
    cluster.waiting_reason = "ImagePullBackOff"
    steps = {s.name: s for s in run_canary(cluster)}  # no harness bundle: no init container
    assert steps["pod"].status == "FAILED"
    assert "cannot pull registry.example/forge-base:bookworm (ImagePullBackOff)" in steps["pod"].detail
    assert "set env.image" in steps["pod"].fix
    nothing_left(cluster)


def test_pod_security_rejection_is_not_called_rbac(cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    def admission(namespace: str, body: dict[str, Any]) -> None:
        raise ApiException(status=403, reason='pods "x" is forbidden: violates PodSecurity "restricted:latest"')

    monkeypatch.setattr(cluster, "_create_namespaced_pod", admission)
    steps = {s.name: s for s in run_canary(cluster)}
    assert steps["pod"].status == "FAILED" and "Pod Security admission rejected the pod" in steps["pod"].detail
    assert "RBAC" not in steps["pod"].detail
    nothing_left(cluster)


def test_egress_not_blocked_is_the_cni(cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    pod(cluster).egress = b"connected\n"
    code, out, _ = forge(monkeypatch, capsys, "k8s", "check", "--egress-target", "10.96.0.1:443")
    steps = lines(out)
    assert code == 1
    assert steps["egress"].startswith("FAILED: egress not blocked: the pod opened a connection to 10.96.0.1:443")
    assert "your CNI does not enforce NetworkPolicy" in out and "Calico or Cilium" in out
    assert steps["proxy"].startswith("ok:"), "the proxy is still checked"
    nothing_left(cluster)


@pytest.mark.parametrize(("answer", "seen"), [
    (b"unresolved [Errno -2] Name or service not known\n", "does not resolve"),
    (b"closed timed out\n", "refused or timed out"),
    (b"http-error 503 HTTP Error 503\n", "answered"),
])
def test_proxy_unreachable_with_its_fix(cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str], answer: bytes, seen: str) -> None:
    pod(cluster).proxy = answer
    code, out, _ = forge(monkeypatch, capsys, "k8s", "check")
    steps = lines(out)
    assert code == 1
    assert steps["proxy"].startswith(f"FAILED: proxy unreachable: replica 0 ({PROXY_HOST}:8800) {seen}")
    assert "proxy pods (app.kubernetes.io/name=forge-proxy): none" in steps["proxy"]
    assert "forge k8s manifests --proxy-replicas 1 | kubectl apply -f -" in out
    assert steps["rollout"].startswith("not run: skipped: the proxy step failed")
    nothing_left(cluster)


def test_ctrl_c_still_removes_everything(cluster: FakeCluster) -> None:
    seen: list[str] = []

    def interrupt(step: Step) -> None:
        seen.append(f"{step.name} {step.status}")
        if step.name == "pod":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_canary(cluster, report=interrupt)
    assert seen == ["api ok", "rbac ok", "pod-security ok", "pod ok", "cleanup ok"]
    nothing_left(cluster)


def test_cleanup_that_fails_is_reported_with_what_is_left(cluster: FakeCluster) -> None:
    """Deletes refused after the pod ran: the last step lists what its label still finds instead of claiming ok."""
    cluster.failures["delete_namespaced_pod"] = [403]
    cluster.failures["delete_collection_namespaced_pod"] = [403]
    steps = {s.name: s for s in run_canary(cluster)}
    assert steps["cleanup"].status == "FAILED"
    assert steps["cleanup"].detail.startswith("left behind: pod/forge-canary-")
    assert steps["cleanup"].fix.endswith("delete pods,networkpolicies -l forge.canary=true")
    assert cluster.leftovers("forge.canary") == [f"pod/{name}" for name in cluster.pods]
    cluster.pods.clear()


def test_rollout_step_judged_by_the_run_it_made(cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """With proxy.url the step runs one rollout (forge's run stubbed here: the fake cannot run a harness); ok only
    with status ok and model calls recorded."""
    from forge_cli.rollout import run as rollout_run

    results = iter([{"status": {"ok": 1}, "calls": 3, "mean_reward": 1.0, "run_dir": "runs/x"},
                    {"status": {"infra_error": 1}, "calls": 0, "mean_reward": None, "run_dir": "runs/y"}])
    asked: list[Any] = []

    def execute(exp: Any, data: Any, **kwargs: Any) -> dict[str, Any]:
        asked.append(exp.rollout)
        return next(results)

    monkeypatch.setattr(rollout_run, "execute", execute)
    args = ("k8s", "check", "proxy.url=http://127.0.0.1:8800")
    code, out, _ = forge(monkeypatch, capsys, *args)
    assert code == 0 and lines(out)["rollout"].startswith("ok: 1 rollout of react: 3 model calls")
    assert (asked[0].max_tasks, asked[0].samples_per_task, asked[0].concurrency) == (1, 1, 1)
    code, out, _ = forge(monkeypatch, capsys, *args)
    assert code == 1 and lines(out)["rollout"].startswith("FAILED: the rollout failed: 1 rollout of react: status "
                                                          "{'infra_error': 1}")
    assert "runs/y" in out
    nothing_left(cluster)


def test_doctor_live_runs_the_same_canary(cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    pod(cluster).egress = b"connected\n"
    code, out, _ = forge(monkeypatch, capsys, "doctor", "runtime=kubernetes", "--live", "--json")
    report = json.loads(out)
    assert code == 1 and "checks" in report
    assert report["live"]["failed"] == ["egress"]
    nothing_left(cluster)


def test_unknown_namespace_is_bad_input(cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = forge(monkeypatch, capsys, "k8s", "check", "runtime.namespace=nope")
    assert code == 2 and lines(out) == {}, "no step is reported for a namespace that is not there"
    assert "error: namespace nope does not exist in this cluster" in err and "fix:" in err
    assert not any(c[0].startswith("create_namespaced") for c in cluster.calls)
    nothing_left(cluster)


def test_no_kubeconfig_is_bad_input(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                    tmp_path: Any) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(kube, "_apis", {})
    code, out, err = forge(monkeypatch, capsys, "k8s", "check")
    assert code == 2 and out == ""
    assert err.startswith("error: no Kubernetes context") and "fix: point KUBECONFIG at a cluster" in err


@pytest.mark.parametrize(("args", "message"), [
    (("k8s", "check", "runtime=docker"), "this experiment's runtime is docker"),
    (("k8s", "check", "--egress-target", "nohost"), "is not HOST:PORT"),
    (("doctor", "--live"), "--live checks a Kubernetes cluster"),
])
def test_other_bad_input(cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                         args: tuple[str, ...], message: str) -> None:
    code, _, err = forge(monkeypatch, capsys, *args)
    assert code == 2 and message in err
    assert not cluster.calls


@pytest.mark.mitm
def test_rollout_through_a_real_proxy_with_a_scripted_harness(cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str],
                                                              tmp_path: Path) -> None:
    """The rollout step through forge's real run path: a real capture proxy stands in for replica 0 (as a
    port-forward would put it on loopback), the fake runs the pod, and its "container" plays the harness: one model
    call to the base URL and key forge put in the pod, the replica's name resolved to the stand-in as cluster DNS
    would. The proxy step's health answer comes from that proxy too. The harness itself is scripted: no agent ran."""
    need_mitmdump()
    token = secrets.token_urlsafe(32)
    upstream = FakeUpstream()
    upstream.start()
    calls: list[int] = []
    try:
        with start_proxy(upstream.url, store=tmp_path / "in-cluster.sqlite", admin_token=token) as proxy:
            scripted = Pod()
            scripted.proxy = b"http 200 " + httpx.get(proxy.url + "/forge/v1/health", timeout=10).content + b"\n"

            def container(name: str, argv: list[str]) -> tuple[bytes, bytes, int] | None:
                if not any("forge-react" in a for a in argv):
                    return scripted(name, argv) or (b"", b"", 0)  # the rest (the verifier's commands) succeed
                env = {e["name"]: e["value"] for e in cluster.pods[name]["spec"]["containers"][0]["env"]}
                base = env["FORGE_BASE_URL"].replace(f"http://{PROXY_HOST}:8800", proxy.url)
                answer = httpx.post(base + "/chat/completions", timeout=30,
                                    headers={"authorization": f"Bearer {env['FORGE_API_KEY']}"},
                                    json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
                calls.append(answer.status_code)
                return b"done\n", b"", 0 if answer.status_code == 200 else 1

            cluster.on_command = container
            monkeypatch.setenv("FORGE_PROXY_TOKEN", token)
            code, out, err = forge(monkeypatch, capsys, "k8s", "check", f"proxy.url={proxy.url}",
                                   f"proxy.upstream={upstream.url}", f"run.output_dir={tmp_path / 'runs'}")
    finally:
        upstream.stop()
    steps = lines(out)
    assert calls == [200], "the pod's model call was accepted by the proxy its rollout was registered on"
    assert code == 0, out + err
    assert steps["proxy"].startswith("ok:") and f"{upstream.url} healthy" in steps["proxy"]
    assert steps["rollout"].startswith("ok: 1 rollout of react: 1 model call recorded through the in-cluster proxy")
    nothing_left(cluster)
