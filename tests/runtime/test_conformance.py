"""The sandbox conformance suite: every backend must behave the same way (inspect_ai's self_check idea).

Runs on local always, on docker with the real daemon (marker ``docker``), on kubernetes when KUBECONFIG
points at a cluster. Every test checks by label/directory afterwards that nothing of its run is left.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from typing import Any

import pytest

from forge_cli.runtime.base import ExecResult, Sandbox, SandboxError, SandboxGone
from tests.runtime.conftest import ROOT, Factory, run


async def _with(factory: Factory, body: Any, **fields: Any) -> Any:
    sandbox = await factory.create(**fields)
    async with sandbox:
        return await body(sandbox)


def test_exec_output_and_exit_codes(sandboxes: Factory) -> None:
    async def body(sb: Sandbox) -> list[ExecResult]:
        return [await sb.exec(["sh", "-c", "echo out; echo err >&2"]),
                await sb.exec(["sh", "-c", "exit 42"]),
                await sb.exec(["false"]),
                await sb.exec(["forge-no-such-command"]),
                await sb.exec(["sh", "-c", "kill -9 $$"])]

    ok, code42, false, missing, killed = run(_with(sandboxes, body))
    assert (ok.exit_code, ok.stdout, ok.stderr, ok.ok, ok.timed_out) == (0, "out\n", "err\n", True, False)
    assert code42.exit_code == 42 and not code42.ok
    assert false.exit_code == 1
    assert missing.exit_code == 127 and "forge-no-such-command" in missing.stderr
    # a command that kills itself is the command's failure, not the sandbox's
    assert killed.exit_code == 137


def test_env_is_the_specs_only(sandboxes: Factory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORGE_HOST_CANARY", "leaked")

    async def body(sb: Sandbox) -> tuple[ExecResult, ExecResult]:
        return await sb.exec(["env"]), await sb.exec(["env"], env={"EXTRA": "x y 'z'", "SPEC_VAR": "override"})

    plain, extra = run(_with(sandboxes, body, env={"SPEC_VAR": "from-spec", "OTHER": "é ü"}))
    env = dict(line.split("=", 1) for line in plain.stdout.splitlines())
    assert env["SPEC_VAR"] == "from-spec" and env["OTHER"] == "é ü"
    assert "FORGE_HOST_CANARY" not in plain.stdout
    # what a sandbox may add on its own: a search path, a home, its hostname, the shell's PWD (and on
    # kubernetes the API service address the kubelet always injects)
    added = {k for k in set(env) - {"SPEC_VAR", "OTHER"} if not k.startswith("KUBERNETES_")
             or sandboxes.kind != "kubernetes"}
    assert added <= {"PATH", "HOME", "HOSTNAME", "PWD"}
    env2 = dict(line.split("=", 1) for line in extra.stdout.splitlines())
    assert env2["EXTRA"] == "x y 'z'" and env2["SPEC_VAR"] == "override"


def test_cwd(sandboxes: Factory) -> None:
    async def body(sb: Sandbox) -> tuple[str, ...]:
        await sb.write_file("sub dir/f.txt", "x")
        default = (await sb.exec(["pwd"])).stdout.strip()
        relative = (await sb.exec(["pwd"], cwd="sub dir")).stdout.strip()
        absolute = (await sb.exec(["pwd"], cwd="/tmp")).stdout.strip()
        missing = await sb.exec(["pwd"], cwd="no-such-dir")
        return default, relative, absolute, str(missing.exit_code), sb.workdir

    default, relative, absolute, missing_code, workdir = run(_with(sandboxes, body))
    assert default == workdir
    assert relative == f"{workdir}/sub dir"
    assert absolute == "/tmp"
    assert missing_code != "0"


def test_timeout_kills_the_process_group(sandboxes: Factory) -> None:
    async def body(sb: Sandbox) -> tuple[ExecResult, float, ExecResult, ExecResult]:
        started = time.monotonic()
        result = await sb.exec(["sh", "-c", "echo before; (sleep 2; echo late > late.txt) & sleep 30"], timeout=1)
        elapsed = time.monotonic() - started
        await asyncio.sleep(2.5)
        late = await sb.exec(["sh", "-c", "test -e late.txt"])
        after = await sb.exec(["echo", "still usable"])
        return result, elapsed, late, after

    result, elapsed, late, after = run(_with(sandboxes, body))
    assert result.timed_out and result.exit_code is None and not result.ok
    assert result.stdout == "before\n"
    assert elapsed < 6
    assert late.exit_code == 1, "the background child outlived the timeout"
    assert after.stdout == "still usable\n"


def test_deadline_of_the_sandbox(sandboxes: Factory) -> None:
    async def body(sb: Sandbox) -> SandboxError:
        with pytest.raises(SandboxGone) as info:
            await sb.exec(["sleep", "30"])
        return info.value

    error = run(_with(sandboxes, body, timeout_s=3))
    assert error.status == "timeout" and "deadline" in error.message


def test_streamed_output(sandboxes: Factory) -> None:
    seen: list[tuple[float, str, bytes]] = []

    async def body(sb: Sandbox) -> tuple[ExecResult, float]:
        started = time.monotonic()
        result = await sb.exec(["sh", "-c", "echo first; echo warn >&2; sleep 2; echo second"],
                               on_output=lambda stream, chunk: seen.append((time.monotonic() - started, stream, chunk)))
        return result, time.monotonic() - started

    result, total = run(_with(sandboxes, body))
    assert result.stdout == "first\nsecond\n"
    first = next(t for t, stream, chunk in seen if stream == "stdout" and b"first" in chunk)
    assert first < total - 1.0, "output was not streamed while the command ran"
    assert b"".join(c for _, s, c in seen if s == "stderr") == b"warn\n"


def test_large_output(sandboxes: Factory) -> None:
    size = 8 * 1024 * 1024

    async def body(sb: Sandbox) -> tuple[ExecResult, ExecResult]:
        big = await sb.exec(["sh", "-c", f"head -c {size} /dev/zero | tr '\\0' a; head -c 100000 /dev/zero >&2"])
        cut = await sb.exec(["sh", "-c", "head -c 100000 /dev/zero"], output_limit=1000)
        return big, cut

    big, cut = run(_with(sandboxes, body))
    assert len(big.stdout) == size and set(big.stdout) == {"a"} and len(big.stderr) == 100000
    assert big.exit_code == 0 and not big.truncated
    assert len(cut.stdout_bytes) == 1000 and cut.truncated


def test_binary_files(sandboxes: Factory) -> None:
    data = bytes(range(256)) * 4096 + os.urandom(100_000)

    async def body(sb: Sandbox) -> dict[str, Any]:
        await sb.write_file("deep/nested/blob.bin", data)
        await sb.write_file("empty", b"")
        await sb.write_file("/tmp/abs.txt", "text ✓")
        out: dict[str, Any] = {
            "blob": await sb.read_file("deep/nested/blob.bin"),
            "empty": await sb.read_file("empty"),
            "abs": await sb.read_file("/tmp/abs.txt"),
            "size": (await sb.exec(["sh", "-c", "wc -c < deep/nested/blob.bin"])).stdout.strip(),
        }
        # a file a command wrote
        await sb.exec(["sh", "-c", "printf '\\000\\377x' > made.bin"])
        out["made"] = await sb.read_file("made.bin")
        with pytest.raises(FileNotFoundError):
            await sb.read_file("missing.txt")
        with pytest.raises(IsADirectoryError):
            await sb.read_file("deep")
        return out

    out = run(_with(sandboxes, body))
    assert out["blob"] == data and out["size"] == str(len(data))
    assert out["empty"] == b"" and out["abs"] == "text ✓".encode()
    assert out["made"] == b"\x00\xffx"


def test_unicode_paths(sandboxes: Factory) -> None:
    name = "données/日本語 ファイル ✓.txt"

    async def body(sb: Sandbox) -> tuple[bytes, ExecResult, ExecResult]:
        await sb.write_file(name, "contenu")
        made = await sb.exec(["sh", "-c", "echo écrit > 'données/créé.txt'"])
        return await sb.read_file("données/créé.txt"), await sb.exec(["cat", name]), made

    created, cat, made = run(_with(sandboxes, body))
    assert made.exit_code == 0 and created == "écrit\n".encode()
    assert cat.stdout == "contenu"


def test_spec_files_are_written_at_creation(sandboxes: Factory) -> None:
    files: dict[str, str | bytes] = {"task.md": "do it", "/tmp/setup/data.bin": b"\x00\x01"}

    async def body(sb: Sandbox) -> tuple[ExecResult, bytes]:
        return await sb.exec(["cat", "task.md"]), await sb.read_file("/tmp/setup/data.bin")

    cat, data = run(_with(sandboxes, body, files=files))
    assert cat.stdout == "do it" and data == b"\x00\x01"


def test_concurrent_sandboxes_are_isolated(sandboxes: Factory) -> None:
    async def one(index: int) -> tuple[str, str]:
        async with await sandboxes.create() as sb:
            await sb.write_file("mine.txt", str(index))
            await asyncio.sleep(0.2)
            result = await sb.exec(["sh", "-c", "ls; cat mine.txt"])
            return result.stdout, str(index)

    async def all_of_them() -> list[tuple[str, str]]:
        return await asyncio.gather(*(one(i) for i in range(6)))

    for stdout, index in run(all_of_them()):
        assert stdout == f"mine.txt\n{index}"


def test_stop_is_idempotent_and_final(sandboxes: Factory) -> None:
    async def body() -> None:
        sb = await sandboxes.create()
        await sb.stop()
        await sb.stop()
        with pytest.raises(SandboxGone):
            await sb.exec(["true"])

    run(body())


def test_cleanup_after_a_crash(sandboxes: Factory) -> None:
    """A forge process dies with a sandbox and a command running in it: cleanup(run) removes both."""
    script = f"""
import asyncio, os, sys
sys.path.insert(0, {str(ROOT)!r})
from tests.runtime.conftest import Factory
async def main():
    factory = Factory({sandboxes.kind!r})
    factory.run_id = {sandboxes.run_id!r}
    sb = await factory.create()
    asyncio.ensure_future(sb.exec(["sleep", "300"]))
    await asyncio.sleep(1.5)
    print("ready", flush=True)
    os._exit(1)
asyncio.run(main())
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "ready" in proc.stdout, proc.stderr
    assert sandboxes.leftovers(), "the crashed process left nothing to clean up"
    removed = run(sandboxes.cls.cleanup(sandboxes.run_id, sandboxes.runtime))
    assert len(removed) == 1
    assert sandboxes.leftovers() == []
