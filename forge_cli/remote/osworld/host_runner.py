"""OSWorld's own host code (``desktop_env``) on one forge desktop: task setup, scoring, and fetching task files.

A STANDALONE script: stdlib + desktop_env only, no forge imports. forge runs it with the python of
``$FORGE_HOME/envs/osworld`` (``scripts/setup.sh osworld``: desktop-env 1.0.2 and what its controllers and
evaluators import); see forge_cli/desktop/osworld_env.py. Subcommands:

  setup    --task T.json --ports SERVER,CDP,VLC [--host H] --cache-dir D [--screen WxH]
           DesktopEnv(...).reset(task): the task's config steps (downloads from the cache or the network, uploads,
           launches...) through desktop_env's SetupController.
  evaluate --task T.json --ports ... --cache-dir D --last-action DONE|FAIL|NONE
           a fresh DesktopEnv on the same desktop, the task set without re-running its setup (desktop_env's
           ``_set_task_info``), the agent's last action as its action history (``infeasible`` tasks score 1 when
           it is FAIL; any other task scores 0 when it is FAIL, as in OSWorld), then ``DesktopEnv.evaluate()``.
  fetch    --task T.json --cache-dir D
           downloads every file the task's setup and evaluator download (``download`` steps, the Chrome history
           database of ``update_browse_history``, ``cloud_file`` getters) into desktop_env's cache layout, so that
           a later offline setup/evaluate with the same cache finds them.

stdout carries one JSON line (``{"ok": ..., ...}``); logs go to stderr. The desktop is forge's container, reached
through loopback relays: a small provider plugged into desktop_env's provider factory (for this process only)
answers ``host:server:cdp:vnc:vlc`` for its address and does nothing to start, stop or revert it. It is
registered under the name ``docker`` (desktop_env accepts only its known names, and ``docker`` is the one whose
environment starts clean, like forge's container: no snapshot revert before setup).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
import traceback
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

log = logging.getLogger("forge.osworld")

PROVIDER_NAME = "docker"  # see the module docstring
VM_PATH = "forge-desktop"
# SetupController._update_browse_history_setup's empty Chrome history database and its cache name
HISTORY_DB_URL = ("https://huggingface.co/datasets/xlangai/ubuntu_osworld_file_cache/resolve/main/chrome/"
                  "44ee5668-ecd5-4366-a6ce-c1c9b8d4e938/history_empty.sqlite?download=true")
HISTORY_DB_NAME = "history_new.sqlite"
# PythonController waits 5 s between its 3 tries to read a file; a file the agent never wrote costs 15 s that way
FILE_RETRY_INTERVAL_S = 1.0


class RunnerError(Exception):
    """An expected failure: answered as {"ok": false, "error": message}, without a traceback."""


# --- forge's provider --------------------------------------------------------------------------------------------


def install_provider(address: str) -> None:
    """Make desktop_env's provider factory answer forge's provider for ``PROVIDER_NAME`` in this process."""
    import desktop_env.desktop_env as desktop_env_module
    import desktop_env.providers as providers
    from desktop_env.providers.base import Provider, VMManager

    class ForgeProvider(Provider):
        """forge owns the container: nothing to start, stop, save or revert; its address is the relays'."""

        def start_emulator(self, path_to_vm: str, headless: bool, *args: Any, **kwargs: Any) -> None:
            return None

        def get_ip_address(self, path_to_vm: str) -> str:
            return address

        def save_state(self, path_to_vm: str, snapshot_name: str) -> None:
            return None

        def revert_to_snapshot(self, path_to_vm: str, snapshot_name: str) -> str:
            return path_to_vm

        def stop_emulator(self, path_to_vm: str, *args: Any, **kwargs: Any) -> None:
            return None

    class ForgeManager(VMManager):
        def initialize_registry(self, **kwargs: Any) -> None:
            return None

        def add_vm(self, vm_path: str, **kwargs: Any) -> None:
            return None

        def delete_vm(self, vm_path: str, **kwargs: Any) -> None:
            return None

        def occupy_vm(self, vm_path: str, pid: int, **kwargs: Any) -> None:
            return None

        def list_free_vms(self, **kwargs: Any) -> list[str]:
            return [VM_PATH]

        def check_and_clean(self, **kwargs: Any) -> None:
            return None

        def get_vm_path(self, **kwargs: Any) -> str:
            return VM_PATH

    original = providers.create_vm_manager_and_provider

    def factory(provider_name: str, region: str, use_proxy: bool = False) -> tuple[Any, Any]:
        if provider_name.lower().strip() == PROVIDER_NAME:
            return ForgeManager(), ForgeProvider(region)
        return original(provider_name, region, use_proxy=use_proxy)

    providers.create_vm_manager_and_provider = factory
    desktop_env_module.create_vm_manager_and_provider = factory  # bound by name at its import


def make_env(args: argparse.Namespace) -> Any:
    """A DesktopEnv on forge's desktop at ``args.host`` / ``args.ports``."""
    server, cdp, vlc = args.ports
    install_provider(f"{args.host}:{server}:{cdp}:0:{vlc}")
    from desktop_env.desktop_env import DesktopEnv

    env = DesktopEnv(provider_name=PROVIDER_NAME, path_to_vm=VM_PATH, action_space="pyautogui",
                     cache_dir=str(args.cache_dir), screen_size=args.screen, headless=True, require_a11y_tree=False,
                     os_type="Ubuntu", client_password="password")
    env.controller.retry_interval = FILE_RETRY_INTERVAL_S
    # reset() ends with an observation (screenshot); forge takes its own, so skip that round trip
    env._get_obs = lambda: {}
    return env


def probe_server(host: str, port: int, tries: int = 3, timeout_s: float = 5.0) -> str | None:
    """None when the desktop's server answers HTTP at all (any status), else why not."""
    why = ""
    for attempt in range(tries):
        try:
            with urllib.request.urlopen(f"http://{host}:{port}/platform", timeout=timeout_s):
                return None
        except urllib.error.HTTPError:
            return None  # it answered
        except (OSError, ValueError) as exc:
            why = str(getattr(exc, "reason", exc))
        if attempt + 1 < tries:
            time.sleep(1.0)
    return f"the desktop's server at {host}:{port} is unreachable ({why})"


def read_task(path: str) -> dict[str, Any]:
    try:
        task = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RunnerError(f"cannot read the task file {path}: {exc}") from None
    if not isinstance(task, dict) or "id" not in task or "evaluator" not in task:
        raise RunnerError(f"{path} is not an OSWorld task (no id or evaluator)")
    task.setdefault("instruction", "")
    return task


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 500 else text[:500] + "..."


# --- subcommands -------------------------------------------------------------------------------------------------


def task_and_env(args: argparse.Namespace) -> tuple[dict[str, Any], Any]:
    """The task and a DesktopEnv on its desktop; RunnerError when the desktop's server does not answer."""
    task = read_task(args.task)
    unreachable = probe_server(args.host, args.ports[0])
    if unreachable:
        raise RunnerError(unreachable)
    return task, make_env(args)


def cmd_setup(args: argparse.Namespace) -> dict[str, Any]:
    task, env = task_and_env(args)
    try:
        env.reset(task_config=task)
    except Exception as exc:  # a setup step failed: SetupController says which
        log.info("setup failed: %s", traceback.format_exc())
        raise RunnerError(f"OSWorld setup failed: {one_line(exc)}") from None
    return {"ok": True, "error": None}


def cmd_evaluate(args: argparse.Namespace) -> dict[str, Any]:
    task, env = task_and_env(args)
    env._set_task_info(task)  # the task's cache dir and evaluator, without running its setup again
    env.setup_controller.reset_cache_dir(env.cache_dir)
    env.action_history = [] if args.last_action == "NONE" else [args.last_action]
    note = None
    try:
        score = float(env.evaluate())
    except Exception as exc:
        log.info("evaluate raised: %s", traceback.format_exc())
        unreachable = probe_server(args.host, args.ports[0], tries=2)
        if unreachable:
            raise RunnerError(unreachable) from None
        # the desktop is there: a getter or metric failed on what the agent left (no file, unparsable output)
        score, note = 0.0, f"OSWorld's evaluator raised {type(exc).__name__}: {one_line(exc)}; scored 0"
    if score == 0.0:  # getters answer None when the server is gone: tell that apart from a real 0
        unreachable = probe_server(args.host, args.ports[0], tries=2)
        if unreachable:
            raise RunnerError(unreachable)
    answer: dict[str, Any] = {"ok": True, "score": score}
    if note:
        answer["note"] = note
    return answer


def task_files(task: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(url, cache file name, source) for every file the task downloads (as forge_cli/envs/osworld/needs.py)."""
    files: list[tuple[str, str, str]] = []
    evaluator = task.get("evaluator") or {}
    for where, steps in (("config", task.get("config") or []), ("postconfig", evaluator.get("postconfig") or [])):
        for step in steps:
            params = step.get("parameters") or {}
            if step.get("type") == "download":
                for f in params.get("files") or []:
                    if f.get("url") and f.get("path"):
                        name = f"{uuid.uuid5(uuid.NAMESPACE_URL, f['url'])}_{os.path.basename(f['path'])}"
                        files.append((f["url"], name, f"{where} download"))
            elif step.get("type") == "update_browse_history":
                files.append((HISTORY_DB_URL, HISTORY_DB_NAME, f"{where} update_browse_history"))
    for key in ("result", "expected"):
        value = evaluator.get(key)
        for getter in value if isinstance(value, list) else [value]:
            if not isinstance(getter, dict) or getter.get("type") != "cloud_file":
                continue
            multi = bool(getter.get("multi"))
            urls = getter.get("path") if multi else [getter.get("path")]
            dests = getter.get("dest") if multi else [getter.get("dest")]
            for url, dest in zip(urls or [], dests or [], strict=False):
                if url and dest:
                    files.append((url, dest, f"evaluator {key} cloud_file"))
    return list(dict.fromkeys(files))


def download(url: str, path: Path, timeout_s: float) -> int:
    """``url`` into ``path`` (through a temporary file beside it); the size in bytes."""
    tmp = path.with_name(path.name + ".part")
    request = urllib.request.Request(url, headers={"User-Agent": "forge-osworld-fetch"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response, tmp.open("wb") as out:
            size = 0
            while chunk := response.read(1 << 16):
                out.write(chunk)
                size += len(chunk)
        tmp.replace(path)
        return size
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def cmd_fetch(args: argparse.Namespace) -> dict[str, Any]:
    task = read_task(args.task)
    task_dir = Path(args.cache_dir) / str(task["id"])
    task_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for url, name, source in task_files(task):
        path = task_dir / name
        entry: dict[str, Any] = {"url": url, "path": str(path), "source": source}
        if path.is_file() and path.stat().st_size > 0:
            entry.update(status="cached", bytes=path.stat().st_size)
        else:
            try:
                entry.update(status="downloaded", bytes=download(url, path, args.timeout))
                log.info("fetched %s -> %s", url, path)
            except (OSError, ValueError) as exc:
                entry.update(status="failed", error=one_line(exc))
                log.warning("cannot fetch %s: %s", url, exc)
        results.append(entry)
    failed = sum(1 for r in results if r["status"] == "failed")
    answer: dict[str, Any] = {"ok": failed == 0, "task": str(task["id"]), "files": results}
    answer["error"] = f"{failed} of {len(results)} files could not be fetched" if failed else None
    return answer


# --- command line ------------------------------------------------------------------------------------------------


def parse_ports(text: str) -> list[int]:
    try:
        ports = [int(p) for p in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--ports takes SERVER,CDP,VLC port numbers, not {text!r}") from None
    if len(ports) != 3 or not all(0 < p < 65536 for p in ports):
        raise argparse.ArgumentTypeError(f"--ports takes three port numbers SERVER,CDP,VLC, not {text!r}")
    return ports


def parse_screen(text: str) -> tuple[int, int]:
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--screen takes WIDTHxHEIGHT, not {text!r}") from None
    return width, height


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="host_runner.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("setup", "evaluate"):
        s = sub.add_parser(name)
        s.add_argument("--task", required=True)
        s.add_argument("--ports", required=True, type=parse_ports, help="SERVER,CDP,VLC")
        s.add_argument("--host", default="127.0.0.1")
        s.add_argument("--cache-dir", required=True)
        s.add_argument("--screen", type=parse_screen, default=(1920, 1080))
        if name == "evaluate":
            s.add_argument("--last-action", choices=("DONE", "FAIL", "NONE"), default="NONE")
    f = sub.add_parser("fetch")
    f.add_argument("--task", required=True)
    f.add_argument("--cache-dir", required=True)
    f.add_argument("--timeout", type=float, default=300.0, help="seconds per file")
    return p


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[TextIO]:
    """Anything printed inside goes to stderr; yields the real stdout for the one JSON line."""
    real = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        yield real


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    commands = {"setup": cmd_setup, "evaluate": cmd_evaluate, "fetch": cmd_fetch}
    started = time.monotonic()
    with stdout_to_stderr() as out:
        try:
            answer = commands[args.command](args)
        except RunnerError as exc:
            answer = {"ok": False, "error": str(exc)}
        except ImportError as exc:
            answer = {"ok": False, "error": f"desktop_env cannot be imported ({exc}); run scripts/setup.sh osworld"}
        except Exception as exc:  # a bug here or in desktop_env: say it in one line, keep the traceback in the log
            traceback.print_exc(file=sys.stderr)
            answer = {"ok": False, "error": f"{type(exc).__name__}: {one_line(exc)}"}
        answer["seconds"] = round(time.monotonic() - started, 3)
        out.write(json.dumps(answer) + "\n")
        out.flush()
    return 0 if answer.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
