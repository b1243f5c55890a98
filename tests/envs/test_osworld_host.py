"""forge_cli/remote/osworld/host_runner.py in OSWorld's environment ($FORGE_HOME/envs/osworld): fetch, setup, evaluate.

(a) ``fetch`` against a loopback HTTP server standing in for the file hosts; needs.py then finds the task runnable
offline. (b) ``setup`` + ``evaluate`` through OSWorld's own DesktopEnv (forge's provider) against forge's desktop
server on this host (tests/desktop/conftest.py's ``desktop_session``: a private Xvfb, no apps), with tasks whose
getters and metrics need nothing more (``execute`` setups, ``vm_file`` / ``vm_command_line`` / ``cloud_file``
getters, ``infeasible``). Each runner call is a process importing desktop_env (~2 s); they run in parallel.
Skipped, naming the install command, when OSWorld's environment is missing.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from forge_cli.envs.osworld.needs import task_files, unmet_needs
from forge_cli.paths import env_python
from tests.desktop.conftest import DesktopSession, desktop_session  # noqa: F401  (the session fixture)
from tests.requires import requires

RUNNER = Path(__file__).resolve().parents[2] / "forge_cli" / "remote" / "osworld" / "host_runner.py"
FILES = {"/files/note.txt": b"hello from the task\n", "/files/gold.txt": b"forge wrote this\n",
         "/files/a.csv": b"a,b\n1,2\n", "/files/b.csv": b"c\n3\n"}


@pytest.fixture(scope="module")
def osworld_python() -> Path:
    requires("osworld")
    return env_python("osworld")


@dataclass
class Runner:
    python: Path
    tmp: Path

    def __call__(self, command: str, task: dict[str, Any], *args: str) -> dict[str, Any]:
        path = self.tmp / f"{task['id']}-{command}-{abs(hash(args))}.json"
        path.write_text(json.dumps(task), encoding="utf-8")
        done = subprocess.run([str(self.python), str(RUNNER), command, "--task", str(path), *args],
                              capture_output=True, text=True, timeout=120)
        lines = done.stdout.splitlines()
        assert len(lines) == 1, f"stdout must be one JSON line:\n{done.stdout}\nstderr:\n{done.stderr[-3000:]}"
        answer: dict[str, Any] = json.loads(lines[0])
        assert done.returncode == (0 if answer["ok"] else 1)
        assert "Traceback" not in done.stdout
        answer["_stderr"] = done.stderr
        return answer


@pytest.fixture
def run(osworld_python: Path, tmp_path: Path) -> Runner:
    return Runner(osworld_python, tmp_path)


class _Files(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = FILES.get(self.path.split("?")[0])
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture(scope="module")
def file_host() -> Iterator[str]:
    """A loopback HTTP server standing in for OSWorld's file hosts (Hugging Face, Google Drive)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Files)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_fetch_fills_the_cache_that_needs_and_setup_read(run: Runner, file_host: str, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    task = {"id": "fetch-1", "instruction": "", "config": [
        {"type": "download", "parameters": {"files": [{"url": f"{file_host}/files/note.txt?download=true",
                                                       "path": "/home/user/Desktop/note.txt"}]}}],
        "evaluator": {"func": ["compare_text_file", "compare_csv"],
                      "result": [{"type": "vm_file", "path": "/home/user/x.txt", "dest": "x.txt"},
                                 {"type": "vm_file", "path": "/home/user/x.csv", "dest": "x.csv"}],
                      "expected": [{"type": "cloud_file", "path": f"{file_host}/files/gold.txt", "dest": "gold.txt"},
                                   {"type": "cloud_file", "multi": True, "gives": [0, 1],
                                    "path": [f"{file_host}/files/a.csv", f"{file_host}/files/b.csv"],
                                    "dest": ["a.csv", "b.csv"]}]}}
    assert [r.split(":")[0] for r in unmet_needs(task, cache, network=False)] == ["file"]
    answer = run("fetch", task, "--cache-dir", str(cache))
    assert answer["ok"] and answer["error"] is None, answer
    assert [f["status"] for f in answer["files"]] == ["downloaded"] * 4
    assert {Path(f["path"]) for f in answer["files"]} == {f.path(cache, "fetch-1") for f in task_files(task)}
    assert (cache / "fetch-1" / "gold.txt").read_bytes() == FILES["/files/gold.txt"]
    assert unmet_needs(task, cache, network=False) == []
    again = run("fetch", task, "--cache-dir", str(cache))
    assert [f["status"] for f in again["files"]] == ["cached"] * 4

    broken = {**task, "id": "fetch-2", "config": [{"type": "download", "parameters": {"files": [
        {"url": f"{file_host}/files/missing.bin", "path": "/home/user/m.bin"}]}}], "evaluator": {"func": "infeasible"}}
    failed = run("fetch", broken, "--cache-dir", str(cache))
    assert not failed["ok"] and "1 of 1" in failed["error"] and failed["files"][0]["status"] == "failed"
    assert "404" in failed["files"][0]["error"]
    assert [r.split(":")[0] for r in unmet_needs(broken, cache, network=False)] == ["file"]


def _evaluator(func: str, result: dict[str, Any] | None = None, expected: dict[str, Any] | None = None,
               **options: Any) -> dict[str, Any]:
    evaluator: dict[str, Any] = {"func": func}
    if result:
        evaluator["result"] = result
    if expected:
        evaluator["expected"] = expected
    if options:
        evaluator["options"] = options
    return evaluator


def test_setup_and_evaluate_on_forges_desktop_server(run: Runner, desktop_session: DesktopSession,  # noqa: F811
                                                    file_host: str, tmp_path: Path) -> None:
    home, cache = desktop_session.home, tmp_path / "cache"
    port = desktop_session.url.rsplit(":", 1)[1]
    ports = ["--ports", f"{port},{_closed_port()},{_closed_port()}", "--cache-dir", str(cache)]
    note = f"{file_host}/files/note.txt"
    task = {"id": "host-1", "instruction": "", "config": [
        {"type": "execute", "parameters": {"command": [
            "/bin/bash", "-c", "mkdir -p ~/osw && printf 'forge wrote this\\n' > ~/osw/a.txt"]}},
        {"type": "download", "parameters": {"files": [{"url": note, "path": str(home / "osw" / "note.txt")}]}},
        {"type": "sleep", "parameters": {"seconds": 0.1}}],
        "evaluator": _evaluator("compare_text_file", {"type": "vm_file", "path": str(home / "osw/a.txt"),
                                                      "dest": "a.txt"},
                                {"type": "cloud_file", "path": f"{file_host}/files/gold.txt", "dest": "gold.txt"})}
    assert run("fetch", task, "--cache-dir", str(cache))["ok"]
    setup = run("setup", task, *ports, "--screen", "1280x800")
    assert setup["ok"] and setup["error"] is None, setup["_stderr"][-3000:]
    assert (home / "osw" / "a.txt").read_text() == "forge wrote this\n"
    assert (home / "osw" / "note.txt").read_bytes() == FILES["/files/note.txt"]  # uploaded from the cache

    def variant(name: str, evaluator: dict[str, Any]) -> dict[str, Any]:
        return {"id": f"host-{name}", "instruction": "", "config": [], "evaluator": evaluator}

    cat = {"type": "vm_command_line", "command": ["cat", str(home / "osw/a.txt")]}
    cases: list[tuple[dict[str, Any], str, float | None]] = [
        (task, "DONE", 1.0),  # vm_file vs the cached cloud_file, the setup not run again
        (task, "FAIL", 0.0),  # FAIL on a feasible task scores 0, as in OSWorld
        (variant("incl", _evaluator("check_include_exclude", cat, {"type": "rule", "rules": {
            "include": ["forge wrote"], "exclude": ["error"]}})), "DONE", 1.0),
        (variant("exact", _evaluator("exact_match", cat, {"type": "rule", "rules": {"expected": "other\n"}})),
         "DONE", 0.0),
        (variant("shell", _evaluator("exact_match", {"type": "vm_command_line", "shell": True,
                                                     "command": "ls ~/osw | wc -l"},
                                     {"type": "rule", "rules": {"expected": "2\n"}})), "NONE", 1.0),
        (variant("inf", _evaluator("infeasible")), "FAIL", 1.0),
        (variant("inf2", _evaluator("infeasible")), "DONE", 0.0),
        (variant("nofile", _evaluator("compare_text_file", {"type": "vm_file", "path": str(home / "osw/none.txt"),
                                                            "dest": "none.txt"},
                                      {"type": "cloud_file", "path": f"{file_host}/files/gold.txt",
                                       "dest": "gold.txt"})), "DONE", 0.0),  # the agent wrote no file: 0
    ]
    with ThreadPoolExecutor(len(cases)) as pool:
        answers = list(pool.map(lambda c: run("evaluate", c[0], *ports, "--last-action", c[1]), cases))
    for (t, last, score), answer in zip(cases, answers, strict=True):
        assert answer["ok"], (t["id"], answer["error"], answer["_stderr"][-3000:])
        assert answer["score"] == score, (t["id"], last, answer)
        assert answer["seconds"] > 0


def test_failures_are_one_line_errors(run: Runner, desktop_session: DesktopSession,  # noqa: F811
                                      tmp_path: Path) -> None:
    port = desktop_session.url.rsplit(":", 1)[1]
    cache = ["--cache-dir", str(tmp_path / "cache")]
    uncached = {"id": "host-fail", "instruction": "", "evaluator": _evaluator("infeasible"), "config": [
        {"type": "download", "parameters": {"files": [{"url": f"http://127.0.0.1:{_closed_port()}/x.txt",
                                                       "path": str(desktop_session.home / "x.txt")}]}}]}
    gone = f"{_closed_port()},{_closed_port()},{_closed_port()}"
    with ThreadPoolExecutor(3) as pool:
        setup_failed, setup_gone, evaluate_gone = pool.map(lambda a: run(*a), [
            ("setup", uncached, "--ports", f"{port},{_closed_port()},{_closed_port()}", *cache),
            ("setup", uncached, "--ports", gone, *cache),
            ("evaluate", uncached, "--ports", gone, *cache, "--last-action", "FAIL")])
    assert not setup_failed["ok"] and "_download_setup" in setup_failed["error"], setup_failed
    assert "\n" not in setup_failed["error"]
    for answer in (setup_gone, evaluate_gone):
        assert not answer["ok"] and "unreachable" in answer["error"], answer
