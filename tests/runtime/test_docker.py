"""docker backend against the real daemon: faults, security, bad input (marker ``docker``)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from forge_cli.config.schema import DockerRuntime, Resources
from forge_cli.runtime import runner
from forge_cli.runtime.base import (
    SandboxConfigError,
    SandboxError,
    SandboxGone,
    SandboxOutOfMemory,
    SandboxUnavailable,
)
from forge_cli.runtime.docker import DockerSandbox, client_for
from tests.helpers import forge
from tests.runtime.conftest import ROOT, Factory, docker_answers, run

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_daemon")]


@pytest.fixture
def factory() -> Any:
    made = Factory("docker")
    yield made
    left = made.leftovers()
    if left:
        run(DockerSandbox.cleanup(made.run_id, made.runtime))
    assert not left, f"containers left behind: {left}"


def inspect(sb: DockerSandbox) -> dict[str, Any]:
    info: dict[str, Any] = client_for(sb.runtime).api.inspect_container(sb.container_id)
    return info


# ---------------------------------------------------------------- faults
def test_container_killed_under_a_command(factory: Factory) -> None:
    async def body() -> SandboxError:
        sb = await factory.create()
        assert isinstance(sb, DockerSandbox)
        async with sb:
            task = asyncio.ensure_future(sb.exec(["sleep", "60"]))
            await asyncio.sleep(1)
            await asyncio.to_thread(client_for(sb.runtime).api.kill, sb.container_id)
            with pytest.raises(SandboxGone) as info:
                await asyncio.wait_for(task, 30)
            return info.value

    error = run(body())
    assert error.status == "infra_error" and "stopped under the command" in error.message


def test_out_of_memory(factory: Factory) -> None:
    async def body() -> SandboxError:
        async with await factory.create(resources=Resources(memory="64m")) as sb:
            with pytest.raises(SandboxOutOfMemory) as info:
                await sb.exec(["python3", "-c", "x = bytearray(400 * 1024 * 1024); print('no limit')"])
            # the sandbox survives its command's OOM and still runs commands
            assert (await sb.exec(["true"])).ok
            return info.value

    error = run(body())
    assert error.status == "infra_error" and "memory" in error.message and error.result is not None


def test_hang_past_the_deadline(factory: Factory) -> None:
    async def body() -> tuple[SandboxError, dict[str, Any]]:
        async with await factory.create(timeout_s=3) as sb:
            assert isinstance(sb, DockerSandbox)
            with pytest.raises(SandboxGone) as info:
                await sb.exec(["sh", "-c", "sleep 100"], timeout=60)
            await asyncio.sleep(1)
            return info.value, inspect(sb)["State"]

    error, state = run(body())
    assert error.status == "timeout"
    # the container ends at its deadline by itself, even without forge
    assert state["Running"] is False


def test_dockerd_restart_mid_run(factory: Factory) -> None:
    """dockerd goes away under a running command: one clear error; cleanup works once it is back."""
    pid = int(subprocess.run(["pidof", "dockerd"], capture_output=True, text=True, check=True).stdout.split()[0])

    async def body() -> SandboxError:
        sb = await factory.create()
        task = asyncio.ensure_future(sb.exec(["sleep", "60"]))
        await asyncio.sleep(1)
        os.kill(pid, signal.SIGTERM)
        with pytest.raises(SandboxError) as info:
            await asyncio.wait_for(task, 60)
        return info.value

    try:
        error = run(body())
        assert isinstance(error, SandboxUnavailable | SandboxGone), error
        assert "\n" not in error.message and error.fix
    finally:
        for _ in range(60):
            if subprocess.run(["pidof", "dockerd"], capture_output=True).returncode != 0:
                break
            time.sleep(0.5)
        subprocess.run([str(ROOT / "scripts" / "dockerd.sh")], check=True, timeout=120)
    assert docker_answers()
    removed = run(DockerSandbox.cleanup(factory.run_id, factory.runtime))
    assert len(removed) == 1
    assert factory.leftovers() == []


# ---------------------------------------------------------------- security
def test_no_host_paths_no_capabilities(factory: Factory, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    (bundle / "bin").mkdir(parents=True)
    (bundle / "bin" / "harness").write_text("#!/bin/sh\necho harness ran\n")
    (bundle / "bin" / "harness").chmod(0o755)

    async def body() -> tuple[dict[str, Any], list[Any]]:
        async with await factory.create(bundle_host_path=str(bundle)) as sb:
            assert isinstance(sb, DockerSandbox)
            caps = await sb.exec(["sh", "-c", "grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status"])
            ran = await sb.exec(["/opt/forge/harness/bin/harness"])
            write = await sb.exec(["sh", "-c", "echo x > /opt/forge/harness/new"])
            mounts = await sb.exec(["sh", "-c", "cat /proc/self/mountinfo"])
            return inspect(sb), [caps, ran, write, mounts]

    info, (caps, ran, write, mounts) = run(body())
    host = info["HostConfig"]
    assert host["CapDrop"] == ["ALL"] and not host.get("CapAdd") and host["Privileged"] is False
    assert "no-new-privileges" in host["SecurityOpt"]
    assert host["NetworkMode"] == "host"
    # the bundle and the command runner's pipes (runner.py), both read-only
    assert sorted((m["Source"], m["Destination"], m["RW"]) for m in info["Mounts"]) == sorted([
        (str(bundle), "/opt/forge/harness", False), (str(sb_channel_dir(info)), runner.MOUNT, False)])
    for line in caps.stdout.splitlines():
        assert line.split()[1] == "0000000000000000", caps.stdout
    assert ran.stdout == "harness ran\n"
    assert write.exit_code != 0 and "Read-only" in write.stderr
    # no other bind mount of a host path than the bundle
    assert str(tmp_path) in mounts.stdout and str(ROOT) not in mounts.stdout
    assert info["HostConfig"]["Memory"] == 512 * 1000**2 and info["HostConfig"]["PidsLimit"] == 512
    assert not info.get("ExecIDs"), "commands went through the runner, not docker exec"


def test_a_non_root_user_as_a_restricted_pod_runs(tmp_path: Path) -> None:
    """runtime.user (with layout=pod, as a pod under the restricted Pod Security profile): every process runs as that
    user, the workdir is writable for it (a pod's emptyDir), the spec's files and the ones forge writes later belong
    to it (written through exec, as in a pod), and it has no capabilities to regain root."""
    made = Factory("docker-pod-user")

    async def body() -> list[Any]:
        async with await made.create(files={"sub/seed.txt": "seed\n"}) as sb:
            await sb.write_file("/tmp/forge-home/later.txt", "later")
            ids = await sb.exec(["sh", "-c", "id -u; id -g; ps -o user= -p 1"])
            owners = await sb.exec(["stat", "-c", "%u:%g %a %n", "/work", "/work/sub", "/work/sub/seed.txt",
                                    "/tmp/forge-home/later.txt"])
            edit = await sb.exec(["sh", "-c", "echo more >> sub/seed.txt && mkdir -p new/deep && touch new/deep/x"])
            root = await sb.exec(["sh", "-c", "echo x > /etc/forge-test"])
            return [ids, owners, edit, root, await sb.read_file("sub/seed.txt")]

    try:
        ids, owners, edit, root, seed = run(body())
    finally:
        assert not made.leftovers()
    assert ids.stdout.split() == ["1000", "1000", "1000"]
    assert owners.stdout.splitlines() == ["0:0 777 /work", "1000:1000 755 /work/sub",
                                          "1000:1000 644 /work/sub/seed.txt", "1000:1000 644 /tmp/forge-home/later.txt"]
    assert edit.ok and seed == b"seed\nmore\n"
    assert root.exit_code != 0 and "Permission denied" in root.stderr


def sb_channel_dir(info: dict[str, Any]) -> str:
    return next(m["Source"] for m in info["Mounts"] if m["Destination"] == runner.MOUNT)


def test_runner_carries_commands_and_survives_kill_processes(factory: Factory) -> None:
    """Commands run through the in-container runner (no docker exec): output streams, exit codes, a timeout kills the
    command's whole process group, kill_processes spares the runner and ends a command still running (its exit
    status still arrives), and the channel's directory is gone with the sandbox."""
    async def body() -> tuple[Any, ...]:
        sb = await factory.create()
        assert isinstance(sb, DockerSandbox) and sb.channel is not None
        channel_dir = sb.channel.dir
        async with sb:
            both = await sb.exec(["sh", "-c", "echo out; echo err >&2; exit 3"])
            big = await sb.exec(["sh", "-c", "head -c 300000 /dev/zero | tr '\\0' x"])
            timed = await sb.exec(["sh", "-c", "sleep 100 & sleep 100; echo never"], timeout=2)
            left = await sb.exec(["sh", "-c", "ps -eo comm | grep -c '^sleep$' || true"])
            long = asyncio.ensure_future(sb.exec(["sleep", "60"]))
            await asyncio.sleep(1)
            await sb.kill_processes()
            ended = await asyncio.wait_for(long, 20)
            after = await sb.exec(["echo", "still here"])
            execs = inspect(sb).get("ExecIDs")
        return both, big, timed, left, ended, after, execs, channel_dir, sb.channel.usable

    both, big, timed, left, ended, after, execs, channel_dir, usable = run(body())
    assert (both.stdout, both.stderr, both.exit_code) == ("out\n", "err\n", 3)
    assert big.stdout == "x" * 300000 and big.exit_code == 0
    assert timed.timed_out and "never" not in timed.stdout
    assert left.stdout.strip() == "1", "only the idle sleep is left: the timed-out command's group was killed"
    assert ended.exit_code == 137
    assert after.stdout == "still here\n" and usable is True and not execs
    assert not channel_dir.exists()


def test_runner_not_there_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No runner reads the command pipe (an image without setsid, a daemon on another machine): nothing runs and the
    caller is told, so that the backend uses docker exec; the channel is then not tried again."""
    monkeypatch.setattr(runner, "READY_WAIT_S", 0.3)
    channel = runner.Channel(str(tmp_path))
    try:
        assert channel.run("echo hi", lambda *_: None, lambda: True) is False
        assert channel.usable is False and sorted(p.name for p in channel.dir.iterdir()) == ["cmd", "runner.sh"]
    finally:
        channel.close()
    assert not channel.dir.exists()


def test_logs_kept_with_the_rollout(factory: Factory, tmp_path: Path) -> None:
    async def body() -> None:
        sb = await DockerSandbox.create(factory.spec(), factory.runtime, log_dir=tmp_path)
        async with sb:
            await sb.exec(["sh", "-c", "echo hello-log"])

    run(body())
    assert "hello-log" in (tmp_path / "sandbox-output.log").read_text()
    assert (tmp_path / "container-state.json").is_file() and (tmp_path / "sandbox.jsonl").is_file()


# ---------------------------------------------------------------- bad input
def test_image_that_does_not_exist(factory: Factory) -> None:
    with pytest.raises(SandboxConfigError) as info:
        run(factory.create(image="forge-no-such-image:latest"))
    assert "forge-no-such-image" in info.value.message and "never pulls" in str(info.value.fix)
    assert "\n" not in info.value.message


def test_resources_docker_refuses(factory: Factory) -> None:
    with pytest.raises(SandboxConfigError) as info:
        run(factory.create(resources=Resources(memory="1k")))
    assert "memory" in info.value.message.lower()


def test_daemon_unreachable() -> None:
    runtime = DockerRuntime(kind="docker", description="t", docker_host="unix:///nonexistent/docker.sock")
    with pytest.raises(SandboxUnavailable) as info:
        run(DockerSandbox.cleanup("x", runtime))
    assert "cannot reach dockerd" in info.value.message and "dockerd.sh" in str(info.value.fix)


def test_cli_cleanup_and_image_build(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM forge-base:bookworm\nRUN echo built > /built.txt\n")
    built = forge("image", "build", "forge-test-env:latest", str(tmp_path), "-q", timeout=300)
    assert built.returncode == 0, built.stderr
    assert built.stdout.strip().startswith("sha256:")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "Dockerfile").write_text("FROM forge-no-such-base:1\n")
    failed = forge("image", "build", "forge-test-bad:latest", str(bad), timeout=300)
    assert failed.returncode != 0 and "Traceback" not in failed.stderr and "nothing is pulled" in failed.stderr
    subprocess.run(["docker", "rmi", "-f", "forge-test-env:latest"], capture_output=True)
    cleaned = forge("sandbox", "cleanup", "no-such-run", "--json")
    assert cleaned.returncode == 0 and '"docker": []' in cleaned.stdout
