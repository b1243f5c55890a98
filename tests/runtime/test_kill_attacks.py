"""Kill before verify holds on every process layout: after ``kill_processes`` nothing the agent started acts again.

``kill_processes`` runs when the harness ends, before the verifier reads the workspace. Each attack below leaves a
process behind that keeps appending to a file; after the kill the file must stop growing. Layouts: ``local``
(bubblewrap), ``docker`` (docker's ``--init`` as PID 1 and forge's command runner) and ``docker-pod`` (docker's
``layout=pod``: ``sleep infinity`` as PID 1 and every command through ``docker exec``, the process layout of a
Kubernetes sandbox pod). On the pod layout the kill forge used before (sparing "the oldest `sleep` whose parent is
PID 1" and its `sh` children) let the first attack survive: in a pod the idle `sleep` is PID 1 itself, so an agent's
copy of `sh` named `sleep`, orphaned to PID 1, was spared.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.runtime.conftest import Factory, run

WRITER = "while :; do echo x >> {out}; sleep 0.1; done"
ATTACKS = {
    # a copy of sh named sleep, orphaned to PID 1 (what the old kill spared on the pod layout)
    "renamed-sleep": "cp /bin/sh {dir}/sleep && (setsid {dir}/sleep -c '{writer}' >/dev/null 2>&1 &)",
    # a copy of sh named sh, in a new session, double-forked
    "renamed-sh-double-fork": "cp /bin/sh {dir}/sh && (({dir}/sh -c '{writer}' >/dev/null 2>&1 &) &)",
    # a fork loop: new processes keep appearing while /proc is walked, each writing
    "fork-loop": "(setsid sh -c 'while :; do (echo x >> {out}; sleep 5) & sleep 0.02; done' >/dev/null 2>&1 &)",
    # forged pid files where forge's wrapper records its commands
    "forged-pid-files": ("(setsid sh -c '{writer}' >/dev/null 2>&1 & echo $! > /tmp/.forge-exec-0; "
                         "echo 1 > /tmp/.forge-exec-1)"),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_nothing_the_agent_started_survives_the_kill(sandboxes: Factory, attack: str) -> None:
    async def body() -> tuple[int, int, str]:
        sb = await sandboxes.create()
        async with sb:
            where = (await sb.exec(["sh", "-c", "mktemp -d"])).stdout.strip()
            out = f"{where}/answer"
            script = ATTACKS[attack].format(dir=where, out=out, writer=WRITER.format(out=out))
            started = await sb.exec(["sh", "-c", script + "; sleep 1; exit 0"])
            assert started.exit_code == 0, started.stderr
            await sb.kill_processes()
            await asyncio.sleep(0.5)  # anything still alive writes within 0.1 s
            size = f"wc -c < {out}"
            first = (await sb.exec(["sh", "-c", size])).stdout.strip()
            await asyncio.sleep(1.5)
            second = (await sb.exec(["sh", "-c", size])).stdout.strip()
            after = await sb.exec(["echo", "still usable"])
        return int(first), int(second), after.stdout

    first, second, after = run(body())
    assert first > 0, "the attack never wrote"
    assert second == first, f"{attack}: a process kept writing after the kill ({first} -> {second} bytes)"
    assert after == "still usable\n"
