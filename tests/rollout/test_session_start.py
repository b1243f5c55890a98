"""What a rollout session refuses before it starts anything (the policy server takes a minute to start)."""

from __future__ import annotations

import socket

from tests.helpers import forge


def test_a_busy_proxy_port_is_refused_before_the_policy_server_starts() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = forge("rollout", f"proxy.port={port}", "rollout.max_tasks=1", timeout=60)
    assert done.returncode != 0 and f"proxy port {port} on 127.0.0.1 is in use" in done.stderr, done.stderr
    assert "starting the policy server" not in done.stderr and "Traceback" not in done.stderr, done.stderr
