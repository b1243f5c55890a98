"""What an OSWorld task needs that forge's desktop container may not give it (forge side: no desktop_env import).

``unmet_needs(task, cache_dir, network=...)`` answers the reasons one task (its JSON dict, OSWorld's format) cannot
run in a ``forge-desktop`` container; an empty list means it can. Each reason reads ``"KIND: detail"``, KIND one of
``KINDS``:

``file``     a file its setup or evaluator downloads, neither in the cache nor allowed from the network
``network``  a live website or package index (Chrome tabs on real sites, apt/pip installs, web getters)
``account``  a Google account or website login (``login``, ``googledrive`` setups, the Drive getter)
``app``      a program the container lacks (VS Code, gedit, conda, git, zip, PulseAudio), or EasyOCR (a stub here)
``gnome``    GNOME-only machinery (gsettings, gio, GNOME Terminal and its Ctrl+Alt+T, GNOME Shell favourites)
``systemd``  a running systemd or snapd (timedatectl, systemctl, snap)

``task_files(task)`` lists the files its setup and evaluator download, with the name each has in OSWorld's cache
(``<cache_dir>/<task id>/<name>``, the layout ``desktop_env`` itself reads: ``SetupController._download_setup``
names a ``download`` step's file ``<uuid5(URL namespace, url)>_<basename of its VM path>``, ``get_cloud_file``
uses the ``dest`` as is). ``forge osworld fetch`` downloads them (``remote/osworld/host_runner.py fetch`` does the
same, with desktop_env's python, for a standalone run).
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

KINDS = ("file", "network", "account", "app", "gnome", "systemd")

# SetupController._update_browse_history_setup downloads this empty Chrome history database (cached as
# history_new.sqlite in the task's cache directory)
HISTORY_DB_URL = ("https://huggingface.co/datasets/xlangai/ubuntu_osworld_file_cache/resolve/main/chrome/"
                  "44ee5668-ecd5-4366-a6ce-c1c9b8d4e938/history_empty.sqlite?download=true")
HISTORY_DB_NAME = "history_new.sqlite"

# command words the container lacks -> (kind, what to say)
MISSING_COMMANDS: dict[str, tuple[str, str]] = {
    "code": ("app", "VS Code (`code`)"),
    "gedit": ("app", "gedit"),
    "conda": ("app", "conda"),
    "git": ("app", "git"),
    "zip": ("app", "zip"),
    "pactl": ("app", "PulseAudio (`pactl`)"),
    "pulseaudio": ("app", "PulseAudio"),
    "gsettings": ("gnome", "GNOME settings (`gsettings`)"),
    "gio": ("gnome", "GNOME's `gio`"),
    "dconf": ("gnome", "GNOME settings (`dconf`)"),
    "gnome-terminal": ("gnome", "GNOME Terminal"),
    "gnome-terminal-server": ("gnome", "GNOME Terminal"),
    "gnome-shell": ("gnome", "GNOME Shell"),
    "timedatectl": ("systemd", "`timedatectl`"),
    "systemctl": ("systemd", "`systemctl`"),
    "hostnamectl": ("systemd", "`hostnamectl`"),
    "loginctl": ("systemd", "`loginctl`"),
    "journalctl": ("systemd", "`journalctl`"),
    "snap": ("systemd", "snapd (`snap`)"),
}
# OSWorld's related_apps names for apps the container lacks
MISSING_APPS = {"vscode": "VS Code", "vs_code": "VS Code", "picard": "MusicBrainz Picard"}
# window titles (activate_window / close_window) of apps the container lacks
MISSING_WINDOWS: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"^Terminal$"), "gnome", "a GNOME Terminal window"),
    (re.compile(r"Visual Studio Code"), "app", "VS Code (`code`)"),
    (re.compile(r" - gedit$"), "app", "gedit"),
)
# evaluator getters that read live websites, or an account
WEB_GETTERS = {"pdf_from_url", "info_from_website", "gotoRecreationPage_and_get_html_content", "page_info"}
ACCOUNT_GETTERS = {"googledrive_file"}
# metrics that need what forge's OSWorld environment lacks (its easyocr is a stub: scripts/osworld/easyocr)
MISSING_METRICS = {"compare_image_text": "EasyOCR for the compare_image_text metric (forge installs a stub)"}
GNOME_GETTERS = {"vm_terminal_output": "the terminal-output getter (GNOME Terminal's text)"}
# shell commands that reach a package index or the web
NETWORK_COMMAND = re.compile(
    r"\b(?:apt(?:-get)?\s+(?:-\S+\s+)*(?:update|install)|pip3?\s+install|wget\s|curl\s|git\s+clone"
    r"|code\s+--install-extension\s+(?![\w./-]*\.vsix))")
URL = re.compile(r"https?://[^\s\"'<>)\]]+")
TOKEN = re.compile(r"[\w./+-]+")
LOCAL_HOSTS = {"localhost", "127.0.0.1", "0.0.0.0", "::1"}


@dataclass(frozen=True)
class TaskFile:
    """One file a task downloads: from ``url`` to ``<cache_dir>/<task id>/<name>``; ``source`` says which step."""

    url: str
    name: str
    source: str

    def path(self, cache_dir: str | Path, task_id: str) -> Path:
        return Path(cache_dir) / task_id / self.name


def download_cache_name(url: str, vm_path: str) -> str:
    """The cache file name desktop_env gives a ``download`` setup step's file."""
    return f"{uuid.uuid5(uuid.NAMESPACE_URL, url)}_{os.path.basename(vm_path)}"


def _steps(task: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, step) for each setup step: the task's config, then its evaluator's postconfig."""
    for where, steps in (("config", task.get("config") or []),
                         ("postconfig", (task.get("evaluator") or {}).get("postconfig") or [])):
        for step in steps:
            if isinstance(step, dict):
                yield where, step


def _getters(task: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(result|expected, getter config) for each of the evaluator's getters."""
    evaluator = task.get("evaluator") or {}
    for key in ("result", "expected"):
        value = evaluator.get(key)
        for getter in value if isinstance(value, list) else [value]:
            if isinstance(getter, dict) and getter.get("type"):
                yield key, getter


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def task_files(task: Mapping[str, Any]) -> list[TaskFile]:
    """Every file the task's setup and evaluator download (deduplicated, in order)."""
    files: list[TaskFile] = []
    for where, step in _steps(task):
        params = step.get("parameters") or {}
        if step.get("type") == "download":
            for f in params.get("files") or []:
                if f.get("url") and f.get("path"):
                    files.append(TaskFile(f["url"], download_cache_name(f["url"], f["path"]), f"{where} download"))
        elif step.get("type") == "update_browse_history":
            files.append(TaskFile(HISTORY_DB_URL, HISTORY_DB_NAME, f"{where} update_browse_history"))
    for key, getter in _getters(task):
        if getter["type"] != "cloud_file":
            continue
        multi = bool(getter.get("multi"))
        urls = _as_list(getter.get("path")) if multi else [getter.get("path")]
        dests = _as_list(getter.get("dest")) if multi else [getter.get("dest")]
        for url, dest in zip(urls, dests, strict=False):  # OSWorld's own getter zips them too
            if url and dest:
                files.append(TaskFile(url, dest, f"evaluator {key} cloud_file"))
    seen: set[tuple[str, str]] = set()
    unique = []
    for f in files:
        if (f.url, f.name) not in seen:
            seen.add((f.url, f.name))
            unique.append(f)
    return unique


def task_urls(task: Mapping[str, Any]) -> list[str]:
    """The URLs of ``task_files(task)``, once each."""
    return list(dict.fromkeys(f.url for f in task_files(task)))


def missing_files(task: Mapping[str, Any], cache_dir: str | Path | None) -> list[TaskFile]:
    """The task's files that are not (non-empty) in ``cache_dir``."""
    task_id = str(task.get("id", ""))
    missing = []
    for f in task_files(task):
        path = f.path(cache_dir, task_id) if cache_dir else None
        if path is None or not path.is_file() or path.stat().st_size == 0:
            missing.append(f)
    return missing


def _command_text(command: Any) -> str:
    if isinstance(command, list):
        return " ".join(str(part) for part in command)
    return str(command or "")


def _is_pyautogui(text: str) -> bool:
    return bool(re.match(r"\s*python3?\s+-c\s", text)) and "pyautogui" in text


def _commands(task: Mapping[str, Any]) -> Iterator[str]:
    """The text of every command the task runs in the desktop: setup steps and command-line getters."""
    for _, step in _steps(task):
        if step.get("type") in ("launch", "execute", "command", "execute_with_verification"):
            yield _command_text((step.get("parameters") or {}).get("command"))
    for _, getter in _getters(task):
        if getter["type"] in ("vm_command_line", "vm_command_error"):
            yield _command_text(getter.get("command"))


def _command_words(text: str) -> set[str]:
    words = set()
    for token in TOKEN.findall(text):
        name = token.rsplit("/", 1)[1] if token.startswith(("/usr/bin/", "/bin/", "/usr/local/bin/")) else token
        if name in MISSING_COMMANDS:
            words.add(name)
    return words


def _live(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and (parts.hostname or "") not in LOCAL_HOSTS


def _short(urls: list[str], most: int = 2) -> str:
    shown = ", ".join(urls[:most])
    return shown + (f" (+{len(urls) - most} more)" if len(urls) > most else "")


def _web_needs(task: Mapping[str, Any]) -> list[str]:
    """Live websites or package indexes the task reaches (never cacheable)."""
    needs: list[str] = []
    if task.get("proxy"):
        needs.append("the task is marked to run through a proxy (live websites)")
    for where, step in _steps(task):
        kind, params = step.get("type"), step.get("parameters") or {}
        if kind == "chrome_open_tabs":
            urls = [u for u in params.get("urls_to_open") or [] if isinstance(u, str) and _live(u)]
            if urls:
                needs.append(f"{where} opens live websites in Chrome: {_short(urls)}")
        elif kind == "open" and _live(str(params.get("path", ""))):
            needs.append(f"{where} opens {params['path']}")
        elif kind in ("launch", "execute", "command"):
            text = _command_text(params.get("command"))
            urls = [u for u in URL.findall(text) if _live(u)]
            if urls and kind == "launch":
                needs.append(f"{where} launches with {_short(urls)}")
            if NETWORK_COMMAND.search(text):
                needs.append(f"{where} installs or downloads from the network: {text[:80]}")
    for _key, getter in _getters(task):
        if getter["type"] in WEB_GETTERS:
            needs.append(f"the evaluator's {getter['type']} getter reads a live website")
        elif getter["type"] in ("vm_command_line", "vm_command_error") and \
                NETWORK_COMMAND.search(_command_text(getter.get("command"))):
            needs.append(f"the evaluator's {getter['type']} command reaches the network")
    expected = [g for key, g in _getters(task) if key == "expected" and g["type"] == "rule"]
    urls = [u for u in URL.findall(json.dumps(expected)) if _live(u)]
    if urls and any(getter["type"] != "rule" for key, getter in _getters(task) if key == "result"):
        # a rule expecting a web address: the agent must browse to a live site
        needs.append(f"the evaluator expects live websites: {_short(list(dict.fromkeys(urls)))}")
    return needs


def _environment_needs(task: Mapping[str, Any]) -> list[str]:
    """Accounts, apps, GNOME and systemd things the container lacks (``KIND: detail`` each, deduplicated)."""
    needs: list[str] = []
    for where, step in _steps(task):
        kind, params = step.get("type"), step.get("parameters") or {}
        if kind == "login":
            needs.append(f"account: {where} logs in to {params.get('platform', 'a website')}")
        elif kind == "googledrive":
            needs.append(f"account: {where} sets up Google Drive")
        elif kind in ("activate_window", "close_window"):
            for pattern, need_kind, what in MISSING_WINDOWS:
                if pattern.search(str(params.get("window_name", ""))):
                    needs.append(f"{need_kind}: {where} {kind.replace('_', 's ', 1)} {what}")
        elif kind == "execute" and _is_pyautogui(_command_text(params.get("command"))):
            text = _command_text(params.get("command"))
            if re.search(r"hotkey\(\s*\[?\s*['\"]ctrl['\"],\s*['\"]alt['\"],\s*['\"]t['\"]", text):
                needs.append(f"gnome: {where} opens GNOME Terminal with Ctrl+Alt+T")
    for _key, getter in _getters(task):
        if getter["type"] in ACCOUNT_GETTERS:
            needs.append(f"account: the evaluator's {getter['type']} getter reads Google Drive")
        if getter["type"] in GNOME_GETTERS:
            needs.append(f"gnome: {GNOME_GETTERS[getter['type']]}")
        if getter["type"] == "vscode_config":
            needs.append("app: VS Code (`code`) for the evaluator's vscode_config getter")
    for text in _commands(task):
        if _is_pyautogui(text):
            continue
        if "/run/user/1000/bus" in text:
            needs.append("gnome: a command uses GNOME's session bus")
        for word in sorted(_command_words(text)):
            need_kind, what = MISSING_COMMANDS[word]
            needs.append(f"{need_kind}: {what}")
    if re.search(r"gnome-terminal|org\.gnome\.", json.dumps(task.get("evaluator") or {})):
        needs.append("gnome: the evaluator looks for GNOME windows or settings")
    funcs = (task.get("evaluator") or {}).get("func")
    for func in funcs if isinstance(funcs, list) else [funcs]:
        if func in MISSING_METRICS:
            needs.append(f"app: {MISSING_METRICS[func]}")
    for app in task.get("related_apps") or []:
        if isinstance(app, str) and app.lower() in MISSING_APPS:
            needs.append(f"app: {MISSING_APPS[app.lower()]}")
    return needs


def unmet_needs(task: Mapping[str, Any], cache_dir: str | Path | None, *, network: bool) -> list[str]:
    """Why ``task`` cannot run in forge's desktop container (``"KIND: detail"`` each; empty: it can).

    ``cache_dir``: OSWorld's cache (``<cache_dir>/<task id>/<file>``) or None; ``network``: whether the task may
    download its files and reach live websites (when False, only cached files count and any web need is unmet).
    """
    reasons: list[str] = []
    if not network:
        missing = missing_files(task, cache_dir)
        if missing:
            reasons.append(f"file: {len(missing)} not cached, e.g. {missing[0].url} ({missing[0].source})")
        reasons.extend(f"network: {need}" for need in _web_needs(task))
    reasons.extend(_environment_needs(task))
    return list(dict.fromkeys(reasons))
