"""A capture proxy forge did not start (``proxy.url``): records pulled over the control API into the run's store.

- ``RemoteProxy`` against a real proxy process (fake upstream): the pulled rows equal the proxy's stored rows byte
  for byte, paged, and pulling again keeps one copy.
- A real ``forge rollout`` (react, builtin tasks, local sandboxes, real vLLM) through a proxy running in a docker
  container (host networking; forge and its environments mounted read-only; the store inside the container): every
  call lands in the run's own ``traces.sqlite`` with the token ids the container's store holds.
- Bad input: a URL that does not answer (exit 1), a wrong or missing admin token (exit 2), a malformed URL (exit 2).
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from forge_cli.paths import forge_home
from forge_cli.proxy.client import RemoteProxy
from forge_cli.proxy.launcher import ProxyHandle, free_port, start_proxy
from forge_cli.traces import store
from tests.helpers import forge
from tests.proxy.conftest import FakeUpstream, need_mitmdump
from tests.requires import requires

REPO = Path(__file__).resolve().parents[2]
TOKEN_ENV = "FORGE_PROXY_TOKEN"


def _chat(proxy: ProxyHandle, rollout_id: str, key: str, text: str) -> None:
    answer = httpx.post(f"{proxy.url}/r/{rollout_id}/v1/chat/completions", headers={"authorization": f"Bearer {key}"},
                        json={"model": "m", "messages": [{"role": "user", "content": text}]}, timeout=30)
    assert answer.status_code == 200, answer.text


def _stored(path: Path, rollout_id: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT " + ", ".join(store.CALL_FIELDS) + " FROM calls WHERE rollout_id = ? ORDER BY id",
                          (rollout_id,)).fetchall()


@pytest.mark.mitm
def test_pull_copies_the_stored_rows_exactly_paged_and_once(fake_upstream: FakeUpstream, tmp_path: Path) -> None:
    need_mitmdump()
    token = secrets.token_urlsafe(32)
    with start_proxy(fake_upstream.url, store=tmp_path / "remote.sqlite", admin_token=token) as proxy:
        remote = RemoteProxy(url=proxy.url, admin_token=token, store=tmp_path / "run" / "traces.sqlite")
        reg = remote.register("r-1", task="t")
        for i in range(5):
            _chat(proxy, "r-1", reg["key"], f"hello {i}")
        page = remote.rows("r-1", limit=2)
        assert len(page["rows"]) == 2 and page["next"] is not None
        finished = remote.finish("r-1", "ok")
        assert finished["pulled"] == 5
        remote.pull("r-1")  # again: still one copy
        theirs, ours = _stored(tmp_path / "remote.sqlite", "r-1"), _stored(tmp_path / "run" / "traces.sqlite", "r-1")
        assert len(ours) == 5 and ours == theirs
        with sqlite3.connect(tmp_path / "run" / "traces.sqlite") as db:
            assert db.execute("SELECT task, status FROM rollouts WHERE rollout_id = 'r-1'").fetchone() == ("t", "ok")


@pytest.mark.mitm
def test_bad_remote_proxy_input(fake_upstream: FakeUpstream, tmp_path: Path) -> None:
    need_mitmdump()
    base = ["rollout", "--json", f"run.output_dir={tmp_path / 'runs'}", "rollout.max_tasks=1",
            f"proxy.upstream={fake_upstream.url}"]
    nobody = forge(*base, f"proxy.url=http://127.0.0.1:{free_port()}", env={TOKEN_ENV: "x" * 32}, timeout=300)
    assert nobody.returncode == 1 and "does not answer" in nobody.stderr and "Traceback" not in nobody.stderr
    malformed = forge(*base, "proxy.url=notaurl", timeout=300)
    assert malformed.returncode == 2 and "proxy.url" in malformed.stderr
    token = secrets.token_urlsafe(32)
    with start_proxy(fake_upstream.url, store=tmp_path / "remote.sqlite", admin_token=token) as proxy:
        unset = forge(*base, f"proxy.url={proxy.url}", env={TOKEN_ENV: ""}, timeout=300)
        assert unset.returncode == 2 and f"${TOKEN_ENV}" in unset.stderr
        wrong = forge(*base, f"proxy.url={proxy.url}", env={TOKEN_ENV: "w" * 32}, timeout=300)
        assert wrong.returncode == 2 and "refused the admin token" in wrong.stderr
        assert "Traceback" not in unset.stderr + wrong.stderr
    short = forge("proxy", "--upstream", fake_upstream.url, "--admin-token-env", TOKEN_ENV, env={TOKEN_ENV: "abc"})
    assert short.returncode == 2 and "shorter than 16" in short.stderr


@pytest.fixture
def docker_proxy(policy_server: Any) -> Iterator[tuple[str, str, str]]:
    """``forge proxy`` in a container (host networking), its store inside the container: (url, token, name)."""
    requires("docker")
    need_mitmdump()
    token, port, name = secrets.token_urlsafe(32), free_port(), f"forge-remote-proxy-{uuid.uuid4().hex[:8]}"
    python = REPO / ".venv" / "bin" / "python"
    mounts = [REPO, forge_home() / "envs", Path(os.path.realpath(python)).parents[2]]
    started = subprocess.run(
        ["docker", "run", "-d", "--name", name, "--network", "host", "-e", f"{TOKEN_ENV}={token}",
         *[a for m in mounts for a in ("-v", f"{m}:{m}:ro")], "forge-base:bookworm",
         str(python), "-m", "forge_cli", "proxy", "--host", "127.0.0.1", "--port", str(port), "--upstream",
         policy_server.url, "--admin-token-env", TOKEN_ENV, "--store", "/srv/traces.sqlite"],
        capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/forge/v1/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        else:
            logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True).stdout
            pytest.fail(f"the proxy in the container did not start:\n{logs[-2000:]}")
        yield url, token, name
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=120)


@pytest.mark.docker
@pytest.mark.mitm
def test_rollout_through_a_docker_hosted_proxy(docker_proxy: tuple[str, str, str], policy_server: Any,
                                                tmp_path: Path) -> None:
    url, token, name = docker_proxy
    result = forge("rollout", "--json", f"run.output_dir={tmp_path / 'runs'}", f"proxy.url={url}",
                   f"proxy.upstream={policy_server.url}", "rollout.max_tasks=2", "rollout.samples_per_task=1",
                   "model.max_output_tokens=64",
                   'harness.command=[python3,"{{bundle}}/bin/forge-react",--max-steps,"2","{{instruction}}"]',
                   env={TOKEN_ENV: token}, timeout=900)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    run_dir = Path(summary["run_dir"])
    results = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert len(results) == 2 and all(r["calls"] >= 1 for r in results)
    dump = subprocess.run(
        ["docker", "exec", name, str(REPO / ".venv" / "bin" / "python"), "-c",
         "import json, sqlite3; db = sqlite3.connect('/srv/traces.sqlite'); print(json.dumps(db.execute("
         "'SELECT rollout_id, seq, prompt_token_ids, completion_token_ids FROM calls ORDER BY id').fetchall()))"],
        capture_output=True, text=True, timeout=120)
    assert dump.returncode == 0, dump.stderr
    theirs = [tuple(r) for r in json.loads(dump.stdout)]
    with sqlite3.connect(run_dir / "traces.sqlite") as db:
        ours = db.execute("SELECT rollout_id, seq, prompt_token_ids, completion_token_ids FROM calls ORDER BY id"
                          ).fetchall()
    assert sorted(ours) == sorted(theirs) and len(ours) == sum(r["calls"] for r in results)
    assert all(json.loads(row[2]) and json.loads(row[3]) for row in ours), "token ids recorded and pulled"
