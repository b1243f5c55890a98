"""Back-to-back runs on the default proxy port (issue 31, item 7).

A port whose last connections sit in TIME_WAIT can be listened on again at once by forge's servers (asyncio and
the tool server set SO_REUSEADDR), so the pre-flight check must call it free; a port something really listens on
stays "in use". Then two `forge eval` runs on the default ``proxy.port`` one right after the other both succeed.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from forge_cli.ports import bindable, free_port
from forge_cli.rollout.services import _port_free
from tests.eval.test_eval_cli import SOLVER, TWO_TASKS, _eval, _tasks
from tests.rollout.test_rollout_run import NO_UPSTREAM, _script_harness


def _leave_time_wait() -> int:
    """A loopback port whose server side closed a connection first (TIME_WAIT), with nothing listening on it."""
    port = free_port()
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(1)
    client = socket.create_connection(("127.0.0.1", port))
    served, _ = listener.accept()
    served.close()  # the server closes first: its end of the connection goes to TIME_WAIT
    client.recv(1)
    client.close()
    listener.close()
    return port


def test_a_port_in_time_wait_is_free_and_a_listened_port_is_not() -> None:
    port = _leave_time_wait()
    with socket.socket() as plain, pytest.raises(OSError):  # the old check: a bind without SO_REUSEADDR is refused
        plain.bind(("127.0.0.1", port))
    assert bindable("127.0.0.1", port) and _port_free("127.0.0.1", port)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        taken = busy.getsockname()[1]
        assert not bindable("127.0.0.1", taken) and not _port_free("127.0.0.1", taken)


# a harness that calls the proxy once with `Connection: close` (urllib's default): the proxy closes that
# connection first, so the default proxy port keeps a TIME_WAIT entry after the run, as a real harness's calls leave
CALLER = ("python3 -c \"import os, urllib.request as r; r.urlopen(os.environ['FORGE_BASE_URL'] + '/models')\" "
          "2>/dev/null; " + SOLVER)


@pytest.mark.mitm
def test_two_evals_back_to_back_on_the_default_proxy_port(tmp_path: Path) -> None:
    """No proxy.port override: both runs use the default port; the second starts as soon as the first exits."""
    config_dir = _script_harness(tmp_path, "solver", CALLER)
    with (config_dir / "harness" / "solver.yaml").open("a") as spec:
        spec.write('env:\n  FORGE_BASE_URL: "{{base_url}}"\n')
    common = ["+harness=solver", NO_UPSTREAM, f"env.path={_tasks(tmp_path, TWO_TASKS)}",
              f"run.output_dir={tmp_path / 'runs'}", "eval.trials=2"]
    first_code, first, first_err = _eval(tmp_path, *common, config_dir=config_dir)
    assert first_code == 0, first_err
    assert first["overall"]["passes"] == 2  # the harness ran (and called the proxy) in every trial
    second_code, second, second_err = _eval(tmp_path, *common, config_dir=config_dir)
    assert second_code == 0, second_err
    assert first["meta"]["run_dir"] != second["meta"]["run_dir"]
    assert first["meta"]["config"]["proxy"]["port"] == second["meta"]["config"]["proxy"]["port"] == 8800
