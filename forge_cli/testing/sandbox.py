"""The conformance kit of a sandbox runtime (``forge_cli/runtime/base.py``'s ``Sandbox``; inspect_ai's
``self_check`` idea): every backend must behave the same way.

    problems = asyncio.run(check_sandbox(make))   # make(**spec_fields) -> a new Sandbox of the backend
    assert not problems, problems

``make`` creates a sandbox from a spec with the given fields overriding the backend's defaults (``env``,
``files``, ``timeout_s``). Each check in :data:`CHECKS` is also runnable alone (:func:`run_check`), as forge's
own suite does per backend (``tests/runtime/test_conformance.py``, which adds what only forge's backends can be
asked: that a crashed forge leaves nothing :meth:`Sandbox.cleanup` cannot remove, found by label or directory).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from forge_cli.runtime.base import ExecResult, Sandbox, SandboxGone

Make = Callable[..., Awaitable[Sandbox]]
Check = Callable[[Make], Awaitable[None]]


class Problem(AssertionError):
    """What a check found wrong (its message says what a conforming backend does)."""


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise Problem(message)


@contextlib.contextmanager
def _host_env(name: str, value: str) -> Iterator[None]:
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


async def exec_output_and_exit_codes(make: Make) -> None:
    async with await make() as sb:
        ok = await sb.exec(["sh", "-c", "echo out; echo err >&2"])
        code42, false = await sb.exec(["sh", "-c", "exit 42"]), await sb.exec(["false"])
        missing, killed = await sb.exec(["forge-no-such-command"]), await sb.exec(["sh", "-c", "kill -9 $$"])
    _expect((ok.exit_code, ok.stdout, ok.stderr, ok.ok, ok.timed_out) == (0, "out\n", "err\n", True, False),
            f"exec gives exit code, stdout and stderr apart: got {ok}")
    _expect(code42.exit_code == 42 and not code42.ok, f"exit 42 is exit_code 42, not ok: got {code42}")
    _expect(false.exit_code == 1, f"`false` exits 1: got {false.exit_code}")
    _expect(missing.exit_code == 127 and "forge-no-such-command" in missing.stderr,
            f"a missing command exits 127 naming it on stderr: got {missing}")
    # a command that kills itself is the command's failure, not the sandbox's
    _expect(killed.exit_code == 137, f"a command killed by SIGKILL exits 137: got {killed.exit_code}")


async def env_is_the_specs_only(make: Make) -> None:
    with _host_env("FORGE_HOST_CANARY", "leaked"):
        async with await make(env={"SPEC_VAR": "from-spec", "OTHER": "é ü"}) as sb:
            plain = await sb.exec(["env"])
            extra = await sb.exec(["env"], env={"EXTRA": "x y 'z'", "SPEC_VAR": "override"})
    env = dict(line.split("=", 1) for line in plain.stdout.splitlines() if "=" in line)
    _expect(env.get("SPEC_VAR") == "from-spec" and env.get("OTHER") == "é ü", f"the spec's env is set: {env}")
    _expect("FORGE_HOST_CANARY" not in plain.stdout, "the host's environment leaked into the sandbox")
    # what a sandbox may add on its own: a search path, a home, its hostname, the shell's PWD (and on kubernetes
    # the API service address the kubelet always injects)
    added = {k for k in set(env) - {"SPEC_VAR", "OTHER"} if not k.startswith("KUBERNETES_")}
    _expect(added <= {"PATH", "HOME", "HOSTNAME", "PWD"}, f"variables the spec did not give: {sorted(added)}")
    env2 = dict(line.split("=", 1) for line in extra.stdout.splitlines() if "=" in line)
    _expect(env2.get("EXTRA") == "x y 'z'" and env2.get("SPEC_VAR") == "override",
            f"exec's env is added to the spec's, and wins: {env2}")


async def cwd(make: Make) -> None:
    async with await make() as sb:
        await sb.write_file("sub dir/f.txt", "x")
        default = (await sb.exec(["pwd"])).stdout.strip()
        relative = (await sb.exec(["pwd"], cwd="sub dir")).stdout.strip()
        absolute = (await sb.exec(["pwd"], cwd="/tmp")).stdout.strip()
        missing = await sb.exec(["pwd"], cwd="no-such-dir")
        workdir = sb.workdir
    _expect(default == workdir, f"commands run in the workdir {workdir}: got {default}")
    _expect(relative == f"{workdir}/sub dir", f"a relative cwd is under the workdir: got {relative}")
    _expect(absolute == "/tmp", f"an absolute cwd is itself: got {absolute}")
    _expect(missing.exit_code != 0, "a missing cwd is a failed command")


async def timeout_kills_the_process_group(make: Make) -> None:
    async with await make() as sb:
        started = time.monotonic()
        result = await sb.exec(["sh", "-c", "echo before; (sleep 2; echo late > late.txt) & sleep 30"], timeout=1)
        elapsed = time.monotonic() - started
        await asyncio.sleep(2.5)
        late = await sb.exec(["sh", "-c", "test -e late.txt"])
        after = await sb.exec(["echo", "still usable"])
    _expect(result.timed_out and result.exit_code is None and not result.ok,
            f"a command past its timeout is timed_out with no exit code: got {result}")
    _expect(result.stdout == "before\n", f"its output up to the timeout is kept: got {result.stdout!r}")
    _expect(elapsed < 6, f"the timeout of 1 s returned after {elapsed:.1f} s")
    _expect(late.exit_code == 1, "the background child outlived the timeout")
    _expect(after.stdout == "still usable\n", "the sandbox is usable after a timeout")


async def deadline_of_the_sandbox(make: Make) -> None:
    async with await make(timeout_s=3) as sb:
        try:
            await sb.exec(["sleep", "30"])
        except SandboxGone as error:
            _expect(error.status == "timeout" and "deadline" in error.message,
                    f"past its deadline the sandbox is gone with status timeout: got {error.status}: {error}")
            return
    raise Problem("a command past the sandbox's deadline (timeout_s) did not raise SandboxGone")


async def streamed_output(make: Make) -> None:
    seen: list[tuple[float, str, bytes]] = []
    async with await make() as sb:
        started = time.monotonic()
        result = await sb.exec(["sh", "-c", "echo first; echo warn >&2; sleep 2; echo second"],
                               on_output=lambda stream, chunk: seen.append((time.monotonic() - started, stream,
                                                                            chunk)))
        total = time.monotonic() - started
    _expect(result.stdout == "first\nsecond\n", f"stdout: got {result.stdout!r}")
    first = next((t for t, stream, chunk in seen if stream == "stdout" and b"first" in chunk), None)
    _expect(first is not None and first < total - 1.0, "output was not streamed while the command ran")
    _expect(b"".join(c for _, s, c in seen if s == "stderr") == b"warn\n", "stderr is streamed apart")


async def large_output(make: Make) -> None:
    size = 8 * 1024 * 1024
    async with await make() as sb:
        big = await sb.exec(["sh", "-c", f"head -c {size} /dev/zero | tr '\\0' a; head -c 100000 /dev/zero >&2"])
        cut = await sb.exec(["sh", "-c", "head -c 100000 /dev/zero"], output_limit=1000)
    _expect(len(big.stdout) == size and set(big.stdout) == {"a"} and len(big.stderr) == 100000,
            f"8 MiB of stdout and 100 kB of stderr come back whole: got {len(big.stdout)} and {len(big.stderr)}")
    _expect(big.exit_code == 0 and not big.truncated, "output under the limit is not truncated")
    _expect(len(cut.stdout_bytes) == 1000 and cut.truncated, "output_limit cuts the output and says so")


async def binary_files(make: Make) -> None:
    data = bytes(range(256)) * 4096 + os.urandom(100_000)
    async with await make() as sb:
        await sb.write_file("deep/nested/blob.bin", data)
        await sb.write_file("empty", b"")
        await sb.write_file("/tmp/abs.txt", "text ✓")
        blob, empty = await sb.read_file("deep/nested/blob.bin"), await sb.read_file("empty")
        absolute = await sb.read_file("/tmp/abs.txt")
        size = (await sb.exec(["sh", "-c", "wc -c < deep/nested/blob.bin"])).stdout.strip()
        await sb.exec(["sh", "-c", "printf '\\000\\377x' > made.bin"])  # a file a command wrote
        made = await sb.read_file("made.bin")
        for path, error in (("missing.txt", FileNotFoundError), ("deep", IsADirectoryError)):
            try:
                await sb.read_file(path)
            except error:
                continue
            except Exception as exc:
                raise Problem(f"read_file({path!r}) raised {type(exc).__name__}, not {error.__name__}") from None
            raise Problem(f"read_file({path!r}) did not raise {error.__name__}")
    _expect(blob == data and size == str(len(data)), "a binary file is written and read back byte for byte")
    _expect(empty == b"" and absolute == "text ✓".encode(), "empty files and absolute paths work")
    _expect(made == b"\x00\xffx", f"a file a command wrote reads back: got {made!r}")


async def unicode_paths(make: Make) -> None:
    name = "données/日本語 ファイル ✓.txt"
    async with await make() as sb:
        await sb.write_file(name, "contenu")
        made = await sb.exec(["sh", "-c", "echo écrit > 'données/créé.txt'"])
        created, cat = await sb.read_file("données/créé.txt"), await sb.exec(["cat", name])
    _expect(made.exit_code == 0 and created == "écrit\n".encode(), f"a unicode path a command made: {created!r}")
    _expect(cat.stdout == "contenu", f"a unicode path written: cat gives {cat.stdout!r}")


async def spec_files_are_written_at_creation(make: Make) -> None:
    async with await make(files={"task.md": "do it", "/tmp/setup/data.bin": b"\x00\x01"}) as sb:
        cat, data = await sb.exec(["cat", "task.md"]), await sb.read_file("/tmp/setup/data.bin")
    _expect(cat.stdout == "do it" and data == b"\x00\x01", "the spec's files exist when the sandbox is made")


async def concurrent_sandboxes_are_isolated(make: Make) -> None:
    async def one(index: int) -> tuple[str, str]:
        async with await make() as sb:
            await sb.write_file("mine.txt", str(index))
            await asyncio.sleep(0.2)
            result = await sb.exec(["sh", "-c", "ls; cat mine.txt"])
            return result.stdout, str(index)

    for stdout, index in await asyncio.gather(*(one(i) for i in range(6))):
        _expect(stdout == f"mine.txt\n{index}", f"sandbox {index} sees only its own files: {stdout!r}")


async def stop_is_idempotent_and_final(make: Make) -> None:
    sb = await make()
    await sb.stop()
    await sb.stop()
    try:
        result: ExecResult | None = await sb.exec(["true"])
    except SandboxGone:
        return
    raise Problem(f"exec after stop() did not raise SandboxGone (it returned {result})")


CHECKS: dict[str, Check] = {check.__name__: check for check in (
    exec_output_and_exit_codes, env_is_the_specs_only, cwd, timeout_kills_the_process_group,
    deadline_of_the_sandbox, streamed_output, large_output, binary_files, unicode_paths,
    spec_files_are_written_at_creation, concurrent_sandboxes_are_isolated, stop_is_idempotent_and_final)}


async def run_check(name: str, make: Make) -> str | None:
    """One check by name: None when it passes, else what it found (an exception is a finding too)."""
    try:
        await CHECKS[name](make)
    except Problem as problem:
        return f"{name}: {problem}"
    except Exception as exc:
        return f"{name}: raised {type(exc).__name__}: {exc}"
    return None


async def check_sandbox(make: Make, only: list[str] | None = None) -> list[str]:
    """Every check (or those named in ``only``), one after another; the problems found, empty when it conforms."""
    found = [await run_check(name, make) for name in (only or list(CHECKS))]
    return [problem for problem in found if problem is not None]


def sandbox_maker(cls: type[Sandbox], runtime: Any, base_spec: dict[str, Any]) -> Make:
    """A ``make`` for backend ``cls`` with ``runtime`` options: each sandbox from ``base_spec`` (the
    ``SandboxSpec`` fields, with a rollout id made unique per sandbox) and the check's own fields."""
    from forge_cli.runtime.spec import SandboxSpec

    count = 0

    async def make(**fields: Any) -> Sandbox:
        nonlocal count
        count += 1
        values = {**base_spec, "rollout_id": f"{base_spec['rollout_id']}-{count}", **fields}
        return await cls.create(SandboxSpec(**values), runtime)

    return make


__all__ = ["CHECKS", "Make", "Problem", "check_sandbox", "run_check", "sandbox_maker"]

