"""forge_cli/envs/osworld/needs.py: which OSWorld tasks forge's desktop container can run, and the files they need.

The task dicts here are written for these tests in OSWorld's task format (config steps, evaluator getters).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from forge_cli.envs.osworld.needs import (
    HISTORY_DB_NAME,
    HISTORY_DB_URL,
    KINDS,
    download_cache_name,
    missing_files,
    task_files,
    task_urls,
    unmet_needs,
)
from forge_cli.remote.osworld import host_runner

FILES = "https://files.example.org/osworld"


def task(config: list[dict[str, Any]] | None = None, **evaluator: Any) -> dict[str, Any]:
    return {"id": "t-1", "instruction": "do it", "config": config or [],
            "evaluator": {"func": "exact_match", "result": {"type": "vm_command_line", "command": "cat ~/a.txt"},
                          "expected": {"type": "rule", "rules": {"expected": "a\n"}}, **evaluator}}


def execute(command: Any) -> dict[str, Any]:
    return {"type": "execute", "parameters": {"command": command, "shell": isinstance(command, str)}}


def download(url: str, path: str) -> dict[str, Any]:
    return {"type": "download", "parameters": {"files": [{"url": url, "path": path}]}}


def kinds(reasons: list[str]) -> set[str]:
    return {r.split(":")[0] for r in reasons}


def test_a_local_task_is_runnable_offline() -> None:
    t = task([execute(["/bin/bash", "-c", "echo a > ~/a.txt"]),
              {"type": "launch", "parameters": {"command": ["libreoffice", "--calc"]}},
              {"type": "activate_window", "parameters": {"window_name": "a.xlsx - LibreOffice Calc"}}],
             postconfig=[execute(["python", "-c", "import pyautogui; pyautogui.hotkey('ctrl', 's')"])])
    assert unmet_needs(t, None, network=False) == []
    assert task_files(t) == []


def test_download_cache_name_is_desktop_envs() -> None:
    url = f"{FILES}/sheet.xlsx?download=true"
    assert download_cache_name(url, "/home/user/Desktop/sheet.xlsx") == \
        f"{uuid.uuid5(uuid.NAMESPACE_URL, url)}_sheet.xlsx"


def test_files_of_downloads_cloud_files_and_history() -> None:
    t = task([download(f"{FILES}/in.docx", "/home/user/in.docx"), {"type": "update_browse_history",
                                                                    "parameters": {"history": []}}],
             func=["compare_docx_files", "compare_table"],
             result=[{"type": "vm_file", "path": "/home/user/in.docx", "dest": "in.docx"},
                     {"type": "vm_file", "path": "/home/user/t.xlsx", "dest": "t.xlsx"}],
             expected=[{"type": "cloud_file", "path": f"{FILES}/gold.docx", "dest": "gold.docx"},
                       {"type": "cloud_file", "multi": True, "path": [f"{FILES}/a.xlsx", f"{FILES}/b.xlsx"],
                        "dest": ["a.xlsx", "b.xlsx"], "gives": [0, 1]}])
    files = task_files(t)
    assert [(f.url, f.name) for f in files] == [
        (f"{FILES}/in.docx", download_cache_name(f"{FILES}/in.docx", "/home/user/in.docx")),
        (HISTORY_DB_URL, HISTORY_DB_NAME),
        (f"{FILES}/gold.docx", "gold.docx"), (f"{FILES}/a.xlsx", "a.xlsx"), (f"{FILES}/b.xlsx", "b.xlsx")]
    assert task_urls(t) == [f.url for f in files]
    # host_runner.py (standalone, desktop_env's python) names them the same way
    assert host_runner.task_files(t) == [(f.url, f.name, f.source) for f in files]


def test_uncached_files_block_offline_only(tmp_path: Path) -> None:
    t = task([download(f"{FILES}/in.docx", "/home/user/in.docx")],
             expected={"type": "cloud_file", "path": f"{FILES}/gold.txt", "dest": "gold.txt"})
    reasons = unmet_needs(t, tmp_path, network=False)
    assert kinds(reasons) == {"file"} and "2 not cached" in reasons[0]
    assert unmet_needs(t, tmp_path, network=True) == []
    for f in task_files(t):
        f.path(tmp_path, "t-1").parent.mkdir(parents=True, exist_ok=True)
        f.path(tmp_path, "t-1").write_bytes(b"x")
    assert missing_files(t, tmp_path) == []
    assert unmet_needs(t, tmp_path, network=False) == []
    (tmp_path / "t-1" / "gold.txt").write_bytes(b"")  # an empty file is not a cached one
    assert [f.name for f in missing_files(t, tmp_path)] == ["gold.txt"]


@pytest.mark.parametrize("step", [
    {"type": "chrome_open_tabs", "parameters": {"urls_to_open": ["https://www.example.com/shop"]}},
    execute("echo password | sudo -S apt-get install -y jq"),
    execute(["pip", "install", "pygame"]),
    {"type": "launch", "parameters": {"command": ["google-chrome", "https://www.example.com/"]}},
])
def test_live_web_needs_network(step: dict[str, Any]) -> None:
    t = task([step])
    assert kinds(unmet_needs(t, None, network=False)) == {"network"}
    assert unmet_needs(t, None, network=True) == []


def test_local_urls_and_proxy() -> None:
    local = task([{"type": "chrome_open_tabs", "parameters": {"urls_to_open": ["http://localhost:8000/"]}}])
    assert unmet_needs(local, None, network=False) == []
    assert kinds(unmet_needs({**task(), "proxy": True}, None, network=False)) == {"network"}


def test_web_getters_and_live_expectations() -> None:
    pdf = task(func="compare_pdfs", result={"type": "vm_file", "path": "/home/user/a.pdf", "dest": "a.pdf"},
               expected={"type": "pdf_from_url", "path": "https://www.example.com/page", "dest": "b.pdf"})
    assert kinds(unmet_needs(pdf, None, network=False)) == {"network"}
    tab = task(func="is_expected_active_tab", result={"type": "active_tab_info"},
               expected={"type": "rule", "rules": {"type": "url", "url": "https://www.example.com/checkout"}})
    assert kinds(unmet_needs(tab, None, network=False)) == {"network"}
    settings = task(func="is_expected_active_tab", result={"type": "active_tab_info"},
                    expected={"type": "rule", "rules": {"type": "url", "url": "chrome://settings/"}})
    assert unmet_needs(settings, None, network=False) == []


@pytest.mark.parametrize(("t", "kind"), [
    (task([{"type": "launch", "parameters": {"command": ["code", "/home/user/project"]}}]), "app"),
    (task([{"type": "activate_window", "parameters": {"window_name": "Visual Studio Code"}}]), "app"),
    (task(result={"type": "vscode_config", "vscode_extension_command": "X", "path": "/p", "dest": "p"}), "app"),
    ({**task(), "related_apps": ["vs_code"]}, "app"),
    (task([execute(["/bin/bash", "-c", "cd ~/p && git init && zip -qr p.zip p"])]), "app"),
    (task(func="compare_image_text", result={"type": "vm_file", "path": "/a.png", "dest": "a.png"}), "app"),
    (task([execute("export DBUS_SESSION_BUS_ADDRESS='unix:path=/run/user/1000/bus'\ngnome-terminal --maximize")]),
     "gnome"),
    (task(result={"type": "vm_command_line", "command": "gsettings get org.gnome.desktop.session idle-delay"}),
     "gnome"),
    (task([execute(["python", "-c", "import pyautogui; pyautogui.hotkey('ctrl', 'alt', 't')"])]), "gnome"),
    (task([{"type": "activate_window", "parameters": {"window_name": "Terminal"}}]), "gnome"),
    (task(result={"type": "vm_terminal_output"}), "gnome"),
    (task(result={"type": "vm_command_line", "command": "timedatectl status"}), "systemd"),
    (task([{"type": "login", "parameters": {"platform": "googledrive", "settings_file": "s.json"}}]), "account"),
    (task([{"type": "googledrive", "parameters": {"settings_file": "s.json", "operation": ["delete"],
                                                  "args": [{}]}}]), "account"),
    (task(result={"type": "googledrive_file", "settings_file": "s.json", "path": ["a"], "dest": "a"}), "account"),
])
def test_what_the_container_lacks(t: dict[str, Any], kind: str) -> None:
    reasons = unmet_needs(t, None, network=True)
    assert kinds(reasons) == {kind}, reasons
    assert all(r.split(":")[0] in KINDS for r in reasons)


def test_pyautogui_text_is_not_taken_for_commands() -> None:
    t = task([execute(["python", "-c", "import pyautogui; pyautogui.write('git status'); pyautogui.press('enter')"]),
              execute(["/bin/bash", "-c", "unzip -q ~/code.zip -d /home/user/code"])])
    assert unmet_needs(t, None, network=True) == []


def test_reasons_are_deduplicated_and_read_kind_first() -> None:
    t = task([{"type": "launch", "parameters": {"command": ["code"]}}, {"type": "launch", "parameters":
                                                                          {"command": "code ~/x"}}])
    reasons = unmet_needs(t, None, network=True)
    assert reasons == ["app: VS Code (`code`)"]
