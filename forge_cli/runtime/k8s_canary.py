"""``forge k8s check``: a live canary for the cluster in the user's kubeconfig.

Each step runs against the cluster and reports ok, FAILED (with the fix) or not run (with why); a failure that makes
later steps meaningless stops them. Everything it creates carries the labels ``forge.run=<its run id>`` and
``forge.canary=true``, and is removed in every case (a failed step, an error, Ctrl-C), by name and then by label;
the last step lists by label that nothing is left.

1. ``api``: the API server answers and the namespace exists (missing: bad input, exit 2);
2. ``rbac``: every verb the backend calls (the Role ``forge k8s manifests`` prints) allowed, asked with
   SelfSubjectAccessReviews;
   ``pod-security``: the Pod Security level the namespace enforces admits forge's sandbox pods
   (``runtime.pod_security``);
3. ``pod``: one sandbox Pod (and its NetworkPolicy) through the backend itself, from the experiment's image, with the
   harness bundle's init container, until Running (image pull errors named with their image);
4. ``exec``: one command in it, its output checked;
5. ``egress``: from the pod, a connection that the NetworkPolicy forbids (default: the API server's Service) must not
   open;
6. ``proxy``: from the pod, each in-cluster proxy replica answers ``GET /forge/v1/health``;
7. ``rollout``: one rollout through the in-cluster proxy (given by the caller: it needs proxy.url and a policy
   server), or not run with the reason;
8. ``cleanup``: everything removed, checked by label.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal

from forge_cli.config.schema import KubernetesRuntime
from forge_cli.errors import UserError
from forge_cli.runtime.base import SandboxError, SandboxUnavailable
from forge_cli.runtime.k8s_manifests import CONTROLLER_ACCOUNT, PSS_LABEL, cluster_manifests, replica_host
from forge_cli.runtime.kubernetes import CONTEXT_FIX, IMAGE_PROBLEMS, KubernetesSandbox, apis_for
from forge_cli.runtime.kubernetes import _status as api_status
from forge_cli.runtime.spec import LABEL_RUN, ProxyEndpoint, SandboxSpec

LABEL_CANARY = "forge.canary"
EXEC_CHECK = ["sh", "-c", "echo forge-canary $((6 * 7))"]
EXEC_EXPECT = "forge-canary 42"
# the probe run in the pod: python3 when the image has it, else a TCP connect through bash; one line of output:
# connected | closed ERROR | unresolved ERROR | http STATUS BODY | http-error ... | noprobe
PROBE_PY = r"""
import socket, sys, urllib.request
mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
try:
    socket.getaddrinfo(host, port)
except OSError as e:
    print("unresolved", e); sys.exit(0)
try:
    socket.create_connection((host, port), timeout=5).close()
except OSError as e:
    print("closed", e or type(e).__name__); sys.exit(0)
if mode != "http":
    print("connected"); sys.exit(0)
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
try:
    with opener.open("http://%s:%d/forge/v1/health" % (host, port), timeout=10) as r:
        print("http", r.status, r.read(400).decode(errors="replace").replace("\n", " "))
except Exception as e:
    print("http-error", getattr(e, "code", ""), e)
"""
PROBE_SH = ('if command -v python3 >/dev/null 2>&1; then exec python3 -c "$0" "$@"; fi; '
            'if [ "$1" = tcp ] && command -v bash >/dev/null 2>&1; then '
            'if timeout 5 bash -c \'exec 3<>"/dev/tcp/$0/$1"\' "$2" "$3" 2>/dev/null; then echo connected; '
            'else echo closed; fi; exit 0; fi; echo noprobe')
StepStatus = Literal["ok", "FAILED", "not run"]


@dataclass
class Step:
    name: str
    status: StepStatus
    detail: str
    fix: str = ""


class Stop(Exception):
    """A failed step after which the later ones mean nothing."""


def probe_argv(mode: str, host: str, port: int) -> list[str]:
    return ["sh", "-c", PROBE_SH, PROBE_PY, mode, host, str(port)]


def split_target(target: str) -> tuple[str, int]:
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"--egress-target {target!r} is not HOST:PORT", fix="e.g. --egress-target 10.96.0.1:443",
                        exit_code=2)
    return host, int(port)


def role_rules(runtime: KubernetesRuntime) -> list[tuple[str, str, str]]:
    """(API group, resource[/subresource], verb) for every permission the Role of ``forge k8s manifests`` grants:
    exactly what the backend calls."""
    role = next(d for d in cluster_manifests(runtime) if d["kind"] == "Role")
    return [(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]]


def rbac_fix(runtime: KubernetesRuntime) -> str:
    ns = runtime.namespace
    return (f"apply the Role forge needs (`forge k8s manifests | kubectl apply -f -` creates Role/{CONTROLLER_ACCOUNT} "
            f"in namespace {ns}) and bind it to the user in your kubeconfig: kubectl -n {ns} create rolebinding "
            f"forge-user --role={CONTROLLER_ACCOUNT} --user=<your user> (or --serviceaccount=<ns>:<account>)")


def _status(error: BaseException) -> int | None:
    seen: BaseException | None = error
    while seen is not None:  # a SandboxError raised from the client's ApiException
        status = api_status(seen)
        if status is not None:
            return status
        seen = seen.__cause__
    return None


class Canary:
    """The steps, in order, against ``runtime``'s cluster; ``report`` sees each step as it finishes."""

    def __init__(self, runtime: KubernetesRuntime, image: str, *, egress_target: str, bundle: str | None = None,
                 report: Callable[[Step], None] = lambda step: None,
                 rollout: Callable[[], str] | None = None, rollout_skipped: str = "") -> None:
        self.runtime, self.image, self.bundle = runtime, image, bundle
        self.egress_host, self.egress_port = split_target(egress_target)
        self.report = report
        self.rollout, self.rollout_skipped = rollout, rollout_skipped
        self.run_id = f"canary-{uuid.uuid4().hex[:8]}"
        self.steps: list[Step] = []
        # the namespace's labels as read by the api step (None: reading the namespace is not allowed)
        self.namespace_labels: dict[str, str] | None = None
        self.sandbox: KubernetesSandbox | None = None
        self.apis: Any = None
        self.gate: Any = None

    @property
    def selector(self) -> str:
        return f"{LABEL_RUN}={self.run_id},{LABEL_CANARY}=true"

    def add(self, name: str, status: StepStatus, detail: str, fix: str = "") -> Step:
        step = Step(name, status, detail, fix)
        self.steps.append(step)
        self.report(step)
        return step

    def fail(self, name: str, detail: str, fix: str) -> Stop:
        self.add(name, "FAILED", detail, fix)
        return Stop(detail)

    def connect(self) -> None:
        """The cluster's API client from the kubeconfig; none (no kubeconfig, no such context) is bad input."""
        if self.apis is None:
            try:
                self.apis, self.gate = apis_for(self.runtime)
            except SandboxUnavailable as error:
                raise UserError(error.message, error.fix or CONTEXT_FIX, exit_code=2) from None

    def run(self) -> list[Step]:
        """Every step; cleanup whatever happens (Ctrl-C included, which is re-raised after it)."""
        self.connect()
        pending = ["api", "rbac", "pod-security", "pod", "exec", "egress", "proxy", "rollout"]
        created = False  # from the pod step on, something may exist to remove
        try:
            for name in pending:
                created = created or name == "pod"
                getattr(self, f"step_{name.replace('-', '_')}")()
        except Stop:
            done = {step.name for step in self.steps}
            failed = self.steps[-1].name
            for name in pending:
                if name not in done:
                    self.add(name, "not run", f"skipped: the {failed} step failed")
        finally:
            if created:
                self.step_cleanup()
        if not created:
            self.add("cleanup", "not run", "nothing was created")
        return self.steps

    # ------------------------------------------------------------------ steps
    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self.gate.call(what, fn, *args, **kwargs)

    def step_api(self) -> None:
        ns = self.runtime.namespace
        try:
            namespace = self._call("reading the namespace", self.apis.core.read_namespace, ns)
            self.namespace_labels = dict(getattr(namespace.metadata, "labels", None) or {})
            detail = f"the API server answers; namespace {ns} exists"
        except Exception as error:
            status = _status(error)
            if status == 404:
                raise UserError(f"namespace {ns} does not exist in this cluster",
                                fix="create it with `forge k8s manifests | kubectl apply -f -` (namespace, RBAC, "
                                    "proxy), or set runtime.namespace=<an existing one>", exit_code=2) from None
            if status == 403:  # a namespaced user may not read namespaces: the API answered all the same
                detail = f"the API server answers (reading namespace {ns} is not allowed: fine)"
            elif status == 401:
                raise self.fail("api", f"the API server refused the kubeconfig's credentials (401: {error})",
                                "refresh the credentials of your kubeconfig's user (e.g. log in to the cluster "
                                "again) or set runtime.context") from None
            elif status == 0:
                raise self.fail("api", f"cannot reach the Kubernetes API server ({error})", CONTEXT_FIX) from None
            else:
                raise self.fail("api", f"the API server answered {status}: {error}", CONTEXT_FIX) from None
        self.add("api", "ok", detail)

    def step_pod_security(self) -> None:
        """The Pod Security level the namespace enforces against the one forge's sandbox pods meet."""
        ns, wanted = self.runtime.namespace, self.runtime.pod_security
        if self.namespace_labels is None:
            self.add("pod-security", "not run", f"reading namespace {ns} is not allowed: its enforced level is "
                                                "unknown (a rejection shows in the pod step)")
            return
        enforced = self.namespace_labels.get(PSS_LABEL)
        if enforced == "restricted" and wanted == "baseline":
            raise self.fail("pod-security", f"namespace {ns} enforces the restricted Pod Security level, but "
                                            "runtime.pod_security=baseline runs sandboxes as their image's user: the "
                                            "API server refuses those pods",
                            "run the sandboxes as non-root (runtime.pod_security=restricted, the default) or label "
                            f"the namespace baseline: kubectl label namespace {ns} {PSS_LABEL}=baseline --overwrite")
        if enforced is None:
            self.add("pod-security", "ok", f"namespace {ns} enforces no Pod Security level; forge's pods meet "
                                           f"{wanted} (forge k8s manifests labels the namespace to enforce it)")
        else:
            self.add("pod-security", "ok", f"namespace {ns} enforces {enforced}; forge's sandbox pods meet {wanted}")

    def step_rbac(self) -> None:
        refused: list[str] = []
        rules = role_rules(self.runtime)
        for group, resource, verb in rules:
            kind, _, sub = resource.partition("/")
            attributes = {"namespace": self.runtime.namespace, "verb": verb, "group": group, "resource": kind}
            if sub:
                attributes["subresource"] = sub
            body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                    "spec": {"resourceAttributes": attributes}}
            try:
                review = self._call("asking the API server what forge may do",
                                    self.apis.auth.create_self_subject_access_review, body)
            except Exception as error:
                self.add("rbac", "not run", f"the API server did not answer an access review ({_status(error)}: "
                                            f"{str(error)[:200]}); the next steps find any refusal themselves")
                return
            if not (review.status and review.status.allowed):
                refused.append(f"{verb} {resource}")
        if refused:
            raise self.fail("rbac", f"RBAC refused: {', '.join(refused)} in namespace {self.runtime.namespace}",
                            rbac_fix(self.runtime))
        self.add("rbac", "ok", f"all {len(rules)} verbs forge uses are allowed (pods, pods/exec, pods/log, "
                               "networkpolicies)")

    def spec(self) -> SandboxSpec:
        rt = self.runtime
        return SandboxSpec(
            run_id=self.run_id, rollout_id=self.run_id, image=self.image, workdir=rt.workdir,
            resources=rt.resources, network="proxy-only", proxy=ProxyEndpoint(replica_host(rt, 0), rt.proxy_port),
            timeout_s=600, bundle_host_path=self.bundle, bundle_mount=rt.bundle_mount,
            labels={LABEL_CANARY: "true"})

    def step_pod(self) -> None:
        spec = self.spec()
        try:
            self.sandbox = asyncio.run(KubernetesSandbox.create(spec, self.runtime))
        except SandboxError as error:
            raise self.pod_failure(spec, error) from None
        self.add("pod", "ok", f"pod {spec.name} (image {spec.image}"
                              + (f", bundle from {self.runtime.bundle_image}" if self.bundle else "")
                              + ") and its NetworkPolicy created; the pod is Running")

    def pod_failure(self, spec: SandboxSpec, error: SandboxError) -> Stop:
        text = error.message
        problem = re.search(r"container (\S+): (" + "|".join(sorted(IMAGE_PROBLEMS)) + ")", text)
        if problem and "Image" in problem.group(2):
            image = self.runtime.bundle_image if problem.group(1) == "bundle" else spec.image
            setting = "runtime.bundle_image" if problem.group(1) == "bundle" else "env.image"
            return self.fail("pod", f"image pull error: the cluster cannot pull {image} ({problem.group(2)}): {text}",
                             f"push {image} to a registry the cluster's nodes pull from and set {setting} to that "
                             f"name (`forge image build`, then docker tag/push); a private registry needs an "
                             f"imagePullSecret on the service account {self.runtime.service_account}; on kind: "
                             f"kind load docker-image {image}")
        status = _status(error)
        if status == 403 and "PodSecurity" in text:
            return self.fail("pod", f"the namespace's Pod Security admission rejected the pod: {text}",
                             f"label namespace {self.runtime.namespace} with the Pod Security level the sandbox pods "
                             "meet, or ask the cluster's admin (docs/sandboxes.md)")
        if status in (401, 403):
            return self.fail("pod", f"RBAC refused creating the pod or its NetworkPolicy: {text}",
                             rbac_fix(self.runtime))
        return self.fail("pod", text, error.fix or "kubectl -n "
                         f"{self.runtime.namespace} describe pod {spec.name} while the check runs shows why")

    def exec(self, argv: list[str], timeout: float = 60) -> Any:
        assert self.sandbox is not None
        return asyncio.run(self.sandbox.exec(argv, timeout=timeout))

    def step_exec(self) -> None:
        try:
            result = self.exec(EXEC_CHECK)
        except SandboxError as error:
            fix = rbac_fix(self.runtime) if _status(error) in (401, 403) else (error.fix or CONTEXT_FIX)
            raise self.fail("exec", f"exec into the pod failed: {error.message}", fix) from None
        if result.exit_code != 0 or result.stdout.strip() != EXEC_EXPECT:
            raise self.fail("exec", f"`{EXEC_CHECK[2]}` in the pod printed {result.stdout.strip()[:200]!r} (exit "
                                    f"{result.exit_code}, stderr {result.stderr.strip()[:200]!r}), expected "
                                    f"{EXEC_EXPECT!r}", "the image needs a POSIX sh (forge-base has one)")
        self.add("exec", "ok", f"`{EXEC_CHECK[2]}` printed {EXEC_EXPECT!r}")

    def probe(self, name: str, mode: str, host: str, port: int) -> tuple[str, str]:
        """(outcome, rest of the probe's line) from inside the pod."""
        try:
            result = self.exec(probe_argv(mode, host, port), timeout=45)
        except SandboxError as error:
            raise self.fail(name, f"the probe could not run in the pod: {error.message}",
                            error.fix or CONTEXT_FIX) from None
        word, _, rest = result.stdout.strip().partition(" ")
        if result.exit_code != 0 or word not in ("connected", "closed", "unresolved", "http", "http-error",
                                                 "noprobe"):
            raise self.fail(name, f"the probe failed in the pod (exit {result.exit_code}): "
                                  f"{(result.stdout + result.stderr).strip()[:300]}",
                            "the image needs sh and python3 (or bash) for the probe")
        return word, rest

    def step_egress(self) -> None:
        target = f"{self.egress_host}:{self.egress_port}"
        word, rest = self.probe("egress", "tcp", self.egress_host, self.egress_port)
        if word == "connected":
            self.add("egress", "FAILED", f"egress not blocked: the pod opened a connection to {target}, which its "
                                         "NetworkPolicy forbids: your CNI does not enforce NetworkPolicy, so sandboxes "
                                         "can reach anything the nodes can",
                     "run a CNI that enforces NetworkPolicy (e.g. Calico or Cilium; on kind: networking."
                     "disableDefaultCNI: true, then install Calico); until then do not run untrusted agents")
        elif word == "closed":
            self.add("egress", "ok", f"blocked: a connection to {target} did not open ({rest or 'refused'})")
        elif word == "unresolved":
            self.add("egress", "FAILED", f"could not test egress: {self.egress_host} does not resolve in the pod "
                                         f"({rest})",
                     "give --egress-target IP:PORT of something in the cluster outside forge (e.g. the API server's "
                     "address from `kubectl get svc kubernetes -n default`)")
        else:
            self.add("egress", "not run", "the image has neither python3 nor bash to open a connection with")

    def step_proxy(self) -> None:
        rt = self.runtime
        answered: list[str] = []
        for i in range(rt.proxy_replicas):
            host = replica_host(rt, i)
            word, rest = self.probe("proxy", "http", host, rt.proxy_port)
            if word == "noprobe":
                self.add("proxy", "not run", "the image has no python3 to call the proxy with")
                return
            if word == "http" and rest.startswith("200"):
                answered.append(f"{host}:{rt.proxy_port} {_health(rest[3:])}")
                continue
            seen = {"unresolved": "does not resolve", "closed": "refused or timed out"}.get(word, "answered")
            raise self.fail("proxy", f"proxy unreachable: replica {i} ({host}:{rt.proxy_port}) {seen} from the "
                                     f"sandbox pod ({(word + ' ' + rest).strip()[:300]}); {self.proxy_pods()}",
                            f"deploy the proxy: create the forge-proxy-token Secret, then `forge k8s manifests "
                            f"--proxy-replicas {rt.proxy_replicas} | kubectl apply -f -`; check its pods are Ready "
                            f"(kubectl -n {rt.namespace} get pods -l app.kubernetes.io/name={rt.proxy_service}) and "
                            f"that runtime.proxy_service/proxy_port/proxy_replicas match what was deployed "
                            "(docs/sandboxes.md)")
        self.add("proxy", "ok", "the sandbox reaches " + "; ".join(answered))

    def proxy_pods(self) -> str:
        label = f"app.kubernetes.io/name={self.runtime.proxy_service}"
        try:
            pods = self._call("listing the proxy pods", self.apis.core.list_namespaced_pod, self.runtime.namespace,
                              label_selector=label)
        except Exception as error:
            return f"the proxy pods could not be listed ({_status(error)})"
        names = [p.metadata.name for p in pods.items]
        return f"proxy pods ({label}): {', '.join(names) if names else 'none'}"

    def step_rollout(self) -> None:
        if self.rollout is None:
            self.add("rollout", "not run", self.rollout_skipped or "no rollout was asked for")
            return
        try:
            detail = self.rollout()
        except Stop:
            raise
        except Exception as error:
            fix = getattr(error, "fix", None) or "run it alone to see the rollout's logs (the command above)"
            raise self.fail("rollout", f"the rollout failed: {getattr(error, 'message', None) or error}",
                            fix) from None
        self.add("rollout", "ok", detail)

    def step_cleanup(self) -> None:
        """Remove the pod and NetworkPolicy by name (the backend's stop), then whatever carries this run's labels;
        list by label that nothing is left."""
        problems: list[str] = []
        if self.sandbox is not None:
            try:
                asyncio.run(self.sandbox.stop())
            except Exception as error:
                problems.append(f"stop: {error}")
        ns, selector = self.runtime.namespace, self.selector
        left: list[str] = []
        try:
            # by label: also what a creation interrupted before it returned a sandbox left (waits until pods are gone)
            asyncio.run(KubernetesSandbox.cleanup(self.run_id, self.runtime))
        except Exception as error:
            problems.append(f"removing by label: {error}")
            with contextlib.suppress(Exception):  # the pods' refusal must not keep the NetworkPolicy
                self._call("removing the canary's NetworkPolicy",
                           self.apis.net.delete_collection_namespaced_network_policy, ns, label_selector=selector)
        try:
            pods = self._call("listing", self.apis.core.list_namespaced_pod, ns, label_selector=selector)
            policies = self._call("listing", self.apis.net.list_namespaced_network_policy, ns,
                                  label_selector=selector)
            left = [f"pod/{p.metadata.name}" for p in pods.items]
            left += [f"networkpolicy/{p.metadata.name}" for p in policies.items]
        except Exception as error:
            problems.append(f"listing by label: {error}")
        fix = f"kubectl -n {ns} delete pods,networkpolicies -l {LABEL_CANARY}=true"
        if left or problems:
            self.add("cleanup", "FAILED", f"left behind: {', '.join(left) or 'unknown (could not list)'} "
                                          f"({'; '.join(problems) or 'still listed after deletion'})", fix)
        else:
            self.add("cleanup", "ok", f"nothing left with labels {selector}")


def _health(body: str) -> str:
    """The proxy's health answer, short: its upstreams' health."""
    try:
        data = json.loads(body)
        ups = ", ".join(f"{u['url']} {'healthy' if u['healthy'] else 'UNHEALTHY'}" for u in data["upstreams"])
        return f"(upstream {ups})" if ups else "(no upstream)"
    except (ValueError, KeyError, TypeError):
        return f"({body.strip()[:120]})"


def summary(steps: list[Step]) -> dict[str, Any]:
    failed = [s.name for s in steps if s.status == "FAILED"]
    return {"ok": not failed, "failed": failed, "not_run": [s.name for s in steps if s.status == "not run"],
            "steps": [asdict(s) for s in steps]}
