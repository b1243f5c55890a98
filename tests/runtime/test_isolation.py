"""Isolation conformance: what a rollout may not reach, and what it still may do, on every isolating backend.

A probe script runs in a sandbox and tries each forbidden read (the run directory with the proxy's admin token
and trace store, ``$FORGE_HOME``, another sandbox's workdir, forge's own task and verifier files) and write
(the system paths, the root, the harness bundle, the run directory, ``$FORGE_HOME``, another sandbox), looks
for host processes and checks its uid; then it does a rollout's allowed work (write in the workdir and HOME,
run python3 and the bundle's program, reach an HTTP server on the host's loopback). Each forbidden attempt
must fail, and every allowed one succeed. Runs on local (bubblewrap: the part ``bubblewrap`` of tests/requires.py,
skipped with the reason where it cannot create namespaces, a failure under CI=true) and docker (marker ``docker``).
"""

from __future__ import annotations

import http.server
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forge_cli.errors import UserError
from forge_cli.paths import PACKAGE_DIR
from forge_cli.runtime import isolation
from forge_cli.runtime.base import Sandbox, SandboxUnavailable
from forge_cli.runtime.local import LocalSandbox
from tests.requires import requires
from tests.runtime.conftest import BACKENDS, ROOT, Factory, run

SECRET = "forge-isolation-secret-7f3a"
# what a backend does not enforce, by design: docker runs commands as the image's user (root, with every capability
# dropped and no-new-privileges: Harbor images and their verifiers need root), in the container's own writable root
# filesystem (not the host's). Asserted exactly, so that closing a gap, or opening another, fails here.
GAPS: dict[str, set[str]] = {"local": set(),
                             "docker": {"write /", "write /etc", "write /usr", "write /usr/bin", "uid 0"}}

PROBE = r'''
import json, os, sys, urllib.request

plan = json.load(open("probe.json"))
out = {"read": {}, "write": {}, "allowed": {}}
for name, path in plan["read"].items():
    try:
        out["read"][name] = "READ: " + (str(os.listdir(path)) if os.path.isdir(path) else open(path).read()[:80])
    except OSError as exc:
        out["read"][name] = f"denied: {exc.strerror}"
for name, path in plan["write"].items():
    try:
        with open(path, "w") as f:
            f.write("probe")
        out["write"][name] = "WRITTEN"
    except OSError as exc:
        out["write"][name] = f"denied: {exc.strerror}"
cmdlines = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            cmdlines.append(open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            pass
out["processes"] = cmdlines
out["uid"] = [os.getuid(), os.geteuid(), os.getgid()]
allowed = out["allowed"]
try:
    open("made-in-workdir.txt", "w").write("ok")
    allowed["workdir"] = open("made-in-workdir.txt").read()
except OSError as exc:
    allowed["workdir"] = str(exc)
try:
    home = os.environ["HOME"]
    open(os.path.join(home, "made-in-home.txt"), "w").write("ok")
    allowed["home"] = open(os.path.join(home, "made-in-home.txt")).read()
except OSError as exc:
    allowed["home"] = str(exc)
allowed["python"] = sys.version_info[0] == 3 and "ok"
try:
    allowed["bundle"] = os.popen(os.environ["BUNDLE"] + "/bin/hello").read().strip()
except OSError as exc:
    allowed["bundle"] = str(exc)
try:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    allowed["loopback"] = opener.open(plan["url"], timeout=20).read().decode()
except Exception as exc:
    allowed["loopback"] = repr(exc)
print(json.dumps(out))
'''


@pytest.fixture(params=BACKENDS[:2])
def kind(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    if name == "docker":
        request.getfixturevalue("docker_daemon")
    else:
        requires("bubblewrap")
    return name


@pytest.fixture
def loopback_server() -> Iterator[str]:
    """An HTTP server on the host's loopback (where the proxy and the tool server listen)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"proxy-reachable"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


def _host_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A run directory and a FORGE_HOME as forge makes them, each holding a secret, and a harness bundle."""
    run_dir = tmp_path / "runs" / "forge-run-x"
    run_dir.mkdir(parents=True)
    (run_dir / "traces.sqlite.8800.admin-token").write_text(SECRET)
    (run_dir / "traces.sqlite").write_text(SECRET)
    home = tmp_path / "forge-home"
    monkeypatch.setenv("FORGE_HOME", str(home))
    (home / "models").mkdir(parents=True)
    (home / "models" / "weights.txt").write_text(SECRET)
    bundle = home / "harnesses" / "probe"
    (bundle / "bin").mkdir(parents=True)
    (bundle / "bin" / "hello").write_text("#!/bin/sh\necho hello-from-bundle\n")
    (bundle / "bin" / "hello").chmod(0o755)
    return {"run": run_dir, "home": home, "bundle": bundle}


def test_forbidden_reads_and_writes_are_denied(kind: str, sandboxes: Factory, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch, loopback_server: str) -> None:
    host = _host_secrets(tmp_path, monkeypatch)
    bundle_mount = sandboxes.runtime.bundle_mount

    async def body() -> tuple[dict[str, Any], Sandbox, str]:
        other = await sandboxes.create()
        own = await sandboxes.create(bundle_host_path=str(host["bundle"]), env={"BUNDLE": bundle_mount})
        async with other, own:
            await other.write_file("other-secret.txt", SECRET)
            other_path = other.resolve("other-secret.txt")
            plan = {
                "url": loopback_server,
                "read": {
                    "admin token": str(host["run"] / "traces.sqlite.8800.admin-token"),
                    "trace store": str(host["run"] / "traces.sqlite"),
                    "run directory": str(host["run"]),
                    "FORGE_HOME file": str(host["home"] / "models" / "weights.txt"),
                    "FORGE_HOME": str(host["home"]),
                    "other sandbox's file": other_path,
                    "task files": str(PACKAGE_DIR / "envs" / "builtin" / "suite.py"),
                    "verifier code": str(PACKAGE_DIR / "envs" / "builtin" / "checks.py"),
                    "forge package": str(PACKAGE_DIR),
                    "forge repository": str(ROOT / "pyproject.toml"),
                },
                "write": {
                    "/": "/forge-probe.txt",
                    "/etc": "/etc/forge-probe.txt",
                    "/usr": "/usr/forge-probe.txt",
                    "/usr/bin": "/usr/bin/forge-probe",
                    "bundle": f"{bundle_mount}/forge-probe.txt",
                    "bundle (host path)": str(host["bundle"] / "forge-probe.txt"),
                    "run directory": str(host["run"] / "forge-probe.txt"),
                    "FORGE_HOME": str(host["home"] / "forge-probe.txt"),
                },
            }
            if other_path != own.resolve("other-secret.txt"):  # docker: the same path is the probe's own workdir
                plan["write"]["other sandbox"] = str(Path(other_path).parent / "forge-probe.txt")
            await own.write_file("probe.py", PROBE)
            await own.write_file("probe.json", json.dumps(plan))
            result = await own.exec(["python3", "probe.py"], timeout=60)
            assert result.exit_code == 0, result.stderr
            # the other sandbox's workdir is untouched
            listing = (await other.exec(["ls"])).stdout.split()
            return json.loads(result.stdout), own, " ".join(listing)

    report, _, other_listing = run(body())
    leaked = {name: text for name, text in report["read"].items() if not text.startswith("denied")}
    assert leaked == {}, f"{kind}: readable from the sandbox: {leaked}"
    written = {f"write {name}" for name, text in report["write"].items() if not text.startswith("denied")}
    root = {"uid 0"} if 0 in report["uid"] else set()
    assert written | root == GAPS[kind], f"{kind}: writable from the sandbox: {report['write']}, ids {report['uid']}"
    assert other_listing == "other-secret.txt"
    for path in (host["run"], host["home"], host["bundle"]):
        assert not list(path.rglob("forge-probe*")), f"{kind}: the probe wrote into {path}"
    # its own PID namespace: no host process (this pytest) is visible, and only a handful of its own
    visible = report["processes"]
    assert not [c for c in visible if "pytest" in c or str(os.getpid()) == c], visible
    assert len(visible) < 10, visible
    assert report["allowed"] == {"workdir": "ok", "home": "ok", "python": "ok", "bundle": "hello-from-bundle",
                                 "loopback": "proxy-reachable"}


def test_local_isolation_can_be_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """``isolation: none`` is the old behaviour (host paths readable), with one loud warning per run."""
    factory = Factory("local")
    factory.runtime = factory.runtime.model_copy(update={"isolation": "none"})
    secret = tmp_path / "host-secret.txt"
    secret.write_text(SECRET)

    async def body() -> list[str]:
        outputs = []
        for _ in range(2):
            async with await factory.create() as sb:
                outputs.append((await sb.exec(["cat", str(secret)])).stdout)
        return outputs

    try:
        assert run(body()) == [SECRET, SECRET]
    finally:
        assert factory.leftovers() == []
    warnings = [line for line in capsys.readouterr().err.splitlines() if "WITHOUT isolation" in line]
    assert len(warnings) == 1 and "isolation=none" in warnings[0]


# ---------------------------------------------------------------- the bwrap command, as pure functions
LAYOUT = isolation.Layout(work=Path("/tmp/sb/r/x/work"), home=Path("/tmp/sb/r/x/home"), tmp=Path("/tmp/sb/r/x/tmp"),
                          fs=Path("/tmp/sb/r/x/fs"), bundle=Path("/root/.cache/forge/harnesses/react"),
                          bundle_mount="/opt/forge/harness")


def _pairs(argv: list[str], flag: str) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, arg in enumerate(argv) if arg == flag]


def test_holder_argv() -> None:
    system = isolation.system_mounts(lambda p: "usr/bin" if p == "/bin" else None, lambda p: p in ("/usr", "/lib"))
    assert system == ["--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--ro-bind", "/lib", "/lib"]
    hidden = [Path("/usr/local/lib/python3.11/site-packages/forge_cli"), Path("/root/.cache/forge"), Path("/srv/x")]
    argv = isolation.holder_argv("bwrap", LAYOUT, ["tests", "etc", "logs"], system, hidden)
    assert argv[:3] == ["bwrap", "--unshare-user", "--uid"] and argv[3:6] == ["65534", "--gid", "65534"]
    assert {"--unshare-pid", "--unshare-ipc", "--die-with-parent"} <= set(argv) and "--unshare-net" not in argv
    assert _pairs(argv, "--bind") == [(str(LAYOUT.tmp), "/tmp"), ("/tmp/sb/r/x/fs/logs", "/logs"),
                                      ("/tmp/sb/r/x/fs/tests", "/tests"), (str(LAYOUT.work), str(LAYOUT.work)),
                                      (str(LAYOUT.home), str(LAYOUT.home))]
    # the bundle only at the spec's path: its host path is in $FORGE_HOME
    assert ("/root/.cache/forge/harnesses/react", "/opt/forge/harness") in _pairs(argv, "--ro-bind")
    assert all(target != str(LAYOUT.bundle) for _, target in _pairs(argv, "--ro-bind"))
    assert ("/etc/passwd", "/etc/passwd") in _pairs(argv, "--ro-bind-try")
    assert not [src for src, _ in _pairs(argv, "--ro-bind-try") if "shadow" in src or "ssh" in src]
    # only a hidden path under a mounted one needs covering; $FORGE_HOME holds the bundle and is never mounted
    tmpfs = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--tmpfs"]
    assert tmpfs == ["/usr/local/lib/python3.11/site-packages/forge_cli"]
    assert argv[-7:] == ["--remount-ro", "/", "--chdir", str(LAYOUT.work), *isolation.HOLDER_COMMAND]


def test_paths_between_host_and_sandbox() -> None:
    mapped = [("/work", LAYOUT.work), ("/tmp/forge-home", LAYOUT.home), ("/opt/forge/harness", LAYOUT.bundle)]
    cases = {"/work/a/b.txt": LAYOUT.work / "a/b.txt", "/tmp/forge-home/.forge/s.json": LAYOUT.home / ".forge/s.json",
             "/tmp/x": LAYOUT.tmp / "x", "/tests/test.sh": LAYOUT.fs / "tests/test.sh",
             str(LAYOUT.work / "c"): LAYOUT.work / "c", "/opt/forge/harness/bin": Path(str(LAYOUT.bundle)) / "bin"}
    for inside, host in cases.items():
        assert isolation.host_path(LAYOUT, inside, mapped) == host, inside
    assert isolation.sandbox_path(LAYOUT, LAYOUT.tmp / "d") == "/tmp/d"
    assert isolation.sandbox_path(LAYOUT, LAYOUT.fs / "tests") == "/tests"
    assert isolation.sandbox_path(LAYOUT, LAYOUT.work / "sub dir") == str(LAYOUT.work / "sub dir")
    assert isolation.enter_argv("nsenter", 42, "/tmp", ["ls", "-l"]) == [
        "nsenter", "-t", "42", "-U", "-m", "-p", "--preserve-credentials", "--", "/usr/bin/env", "-C", "/tmp", "--",
        "ls", "-l"]


def test_modes_without_bubblewrap() -> None:
    missing = isolation.Probe(False, None, "/usr/bin/nsenter", "bubblewrap (bwrap) is not installed")
    auto = isolation.decide("auto", missing)
    assert not auto.isolate and auto.warning is not None
    assert "WITHOUT isolation" in auto.warning and "apt-get install -y bubblewrap" in auto.warning
    with pytest.raises(UserError) as required:
        isolation.decide("bwrap", missing)
    assert required.value.exit_code == 1 and "bubblewrap" in (required.value.fix or "")
    assert isolation.decide("none", isolation.Probe(True, "bwrap", "nsenter")).warning is not None
    assert isolation.decide("auto", isolation.Probe(True, "bwrap", "nsenter")) == isolation.Decision(True)


def test_required_bwrap_that_is_missing_fails_the_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(isolation, "probe", lambda: isolation.Probe(False, None, None, "bwrap is not installed"))
    factory = Factory("local")
    factory.runtime = factory.runtime.model_copy(update={"isolation": "bwrap"})
    with pytest.raises(SandboxUnavailable, match="bwrap is not installed"):
        run(factory.create())
    with pytest.raises(UserError) as preflight:
        LocalSandbox.preflight(factory.runtime, factory.run_id)
    assert preflight.value.exit_code == 1
    assert factory.leftovers() == []
