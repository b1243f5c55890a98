"""forge's desktop server against OSWorld's in-VM HTTP contract, with the request shapes desktop-env 1.0.2 sends.

Each request below is shaped as desktop_env's PythonController / SetupController / getters send it (JSON bodies
with Content-Type application/json, URL-encoded forms for /file and /window_size, a multipart form for
/setup/upload), against the server on a private Xvfb display (conftest.py). desktop_env's own PythonController, run
with OSWorld's environment (scripts/setup.sh osworld), drives the server too.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from tests.desktop.conftest import SCREEN, DesktopSession
from tests.requires import requires

JSON = {"Content-Type": "application/json"}
PYAUTOGUI = "import pyautogui; import time; pyautogui.FAILSAFE = False; {command}"


def post_json(url: str, payload: dict[str, Any], timeout: float = 30) -> httpx.Response:
    """As desktop_env posts: requests.post(url, headers={'Content-Type': 'application/json'}, data=json.dumps(...))."""
    return httpx.post(url, headers=JSON, content=json.dumps(payload), timeout=timeout)


def execute_python(url: str, command: str) -> httpx.Response:
    """PythonController.execute_python_command's request."""
    payload = {"command": ["python", "-c", PYAUTOGUI.format(command=command)], "shell": False}
    return post_json(f"{url}/execute", payload)


def test_info_routes(desktop_server: str, desktop_session: DesktopSession) -> None:
    assert httpx.get(f"{desktop_server}/platform").text == "Linux"
    assert httpx.post(f"{desktop_server}/screen_size").json() == {"width": SCREEN[0], "height": SCREEN[1]}
    desktop = str(desktop_session.home / "Desktop")
    assert httpx.post(f"{desktop_server}/desktop_path").json() == {"desktop_path": desktop}
    assert httpx.get(f"{desktop_server}/no/such/route").status_code == 404
    assert httpx.get(f"{desktop_server}/execute").status_code == 405


def test_execute_pyautogui_moves_the_cursor_and_the_screenshot_shows_it(desktop_server: str) -> None:
    res = execute_python(desktop_server, "pyautogui.moveTo(321, 123)")
    assert res.status_code == 200, res.text
    body = res.json()
    assert body["status"] == "success" and body["returncode"] == 0, body
    assert set(body) >= {"status", "output", "error", "returncode"}
    assert httpx.get(f"{desktop_server}/cursor_position").json() == [321, 123]

    shot = httpx.get(f"{desktop_server}/screenshot", timeout=30)
    assert shot.status_code == 200
    assert shot.headers["content-type"] == "image/png"
    assert shot.content[:8] == b"\x89PNG\r\n\x1a\n"
    img = Image.open(io.BytesIO(shot.content)).convert("RGB")
    assert img.size == SCREEN
    # the pointer is drawn: a white rim along the arrow's left edge, below its tip
    assert img.getpixel((321, 123 + 8)) == (255, 255, 255)
    assert img.getpixel((321 + 40, 123 + 40)) != (255, 255, 255)


def test_execute_shell_strings_lists_and_errors(desktop_server: str, desktop_session: DesktopSession) -> None:
    res = post_json(f"{desktop_server}/execute", {"command": "echo out; echo err >&2; exit 3", "shell": True}).json()
    assert (res["status"], res["output"], res["error"], res["returncode"]) == ("success", "out\n", "err\n", 3)
    # SetupController sends shell commands as a one-element list, e.g. ["sudo chown ..."] with shell true
    res = post_json(f"{desktop_server}/setup/execute", {"command": ["echo $HOME"], "shell": True}).json()
    assert res["output"].strip() == str(desktop_session.home)
    # the getters' get_vm_command_line: requests.post(..., json={"command": [...], "shell": False}); ~ expands
    res = httpx.post(f"{desktop_server}/execute", json={"command": ["ls", "-d", "~/Desktop"], "shell": False}).json()
    assert res["output"].strip() == str(desktop_session.home / "Desktop")
    assert post_json(f"{desktop_server}/execute", {"command": 5}).status_code == 400
    assert post_json(f"{desktop_server}/execute", {}).status_code == 400
    missing = post_json(f"{desktop_server}/execute", {"command": ["/no/such/binary"], "shell": False})
    assert missing.status_code == 500 and "cannot run" in missing.json()["message"]
    slow = post_json(f"{desktop_server}/execute", {"command": "sleep 20", "shell": True, "timeout": 0.5})
    assert slow.status_code == 500 and slow.json()["returncode"] == -1


def test_file_is_404_when_missing(desktop_server: str, desktop_session: DesktopSession) -> None:
    res = httpx.post(f"{desktop_server}/file", data={"file_path": str(desktop_session.home / "nope.txt")})
    assert res.status_code == 404


def test_upload_then_file_round_trip(desktop_server: str, desktop_session: DesktopSession) -> None:
    target = desktop_session.home / "Documents" / "deep" / "data.bin"
    payload = os.urandom(300_000) + b"\r\n--boundary-lookalike\r\n"
    res = httpx.post(f"{desktop_server}/setup/upload", data={"file_path": str(target)},
                     files={"file_data": ("data.bin", payload)}, timeout=30)
    assert res.status_code == 200, res.text
    assert target.read_bytes() == payload
    got = httpx.post(f"{desktop_server}/file", data={"file_path": str(target)}, timeout=30)
    assert got.status_code == 200 and got.content == payload
    assert httpx.post(f"{desktop_server}/setup/upload", data={"file_path": str(target)}).status_code == 400


def test_list_directory_shape(desktop_server: str, desktop_session: DesktopSession) -> None:
    root = desktop_session.home / "tree"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("a")
    (root / "sub" / "b.jpg").write_text("b")
    res = post_json(f"{desktop_server}/list_directory", {"path": str(root)})
    assert res.status_code == 200
    assert res.json() == {"directory_tree": {"name": "tree", "type": "directory", "children": [
        {"name": "a.txt", "type": "file"},
        {"name": "sub", "type": "directory", "children": [{"name": "b.jpg", "type": "file"}]},
    ]}}
    assert post_json(f"{desktop_server}/list_directory", {"path": str(root / "none")}).status_code == 404
    assert post_json(f"{desktop_server}/list_directory", {"path": str(root / "a.txt")}).status_code == 400


def _poll(fn: Any, timeout: float = 10) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


@pytest.mark.requires("desktop-host")
def test_launch_activate_and_close_a_window(desktop_server: str) -> None:
    title = "forge-contract-xterm"
    res = post_json(f"{desktop_server}/setup/launch", {"command": ["xterm", "-T", title], "shell": False})
    assert res.status_code == 200 and "launched successfully" in res.text
    window = {"window_name": title, "strict": False, "by_class": False}
    activated = _poll(lambda: post_json(f"{desktop_server}/setup/activate_window", window).status_code == 200)
    assert activated, "the xterm window never showed"
    strict_class = {"window_name": "XTerm", "strict": True, "by_class": True}
    assert post_json(f"{desktop_server}/setup/activate_window", strict_class).status_code == 200
    size = httpx.post(f"{desktop_server}/window_size", data={"app_class_name": "xterm"}).json()
    assert size["width"] > 0 and size["height"] > 0
    assert post_json(f"{desktop_server}/setup/close_window", {**window, "strict": True}).status_code == 200
    gone = _poll(lambda: post_json(f"{desktop_server}/setup/activate_window", window).status_code == 404)
    assert gone, "the xterm window did not close"
    assert post_json(f"{desktop_server}/setup/close_window", window).status_code == 404
    assert httpx.post(f"{desktop_server}/window_size", data={"app_class_name": "nothing-here"}).status_code == 404


def test_run_bash_script_output_and_timeout(desktop_server: str, desktop_session: DesktopSession) -> None:
    ok = post_json(f"{desktop_server}/run_bash_script",
                   {"script": "pwd\necho oops >&2\nexit 0", "timeout": 10, "working_dir": "/tmp"}).json()
    assert ok == {"status": "success", "output": "/tmp\n", "error": "oops\n", "returncode": 0}
    default_dir = post_json(f"{desktop_server}/run_bash_script", {"script": "pwd; exit 4", "timeout": 10,
                                                                   "working_dir": None}).json()
    assert default_dir["output"].strip() == str(desktop_session.home)
    assert (default_dir["status"], default_dir["returncode"]) == ("error", 4)
    start = time.monotonic()
    slow = post_json(f"{desktop_server}/run_bash_script",
                     {"script": "echo started; sleep 30", "timeout": 1, "working_dir": None})
    assert time.monotonic() - start < 10
    body = slow.json()
    assert slow.status_code == 200
    assert (body["status"], body["returncode"], body["output"]) == ("error", -1, "started\n")
    assert "timed out after 1 seconds" in body["error"]


def test_run_python(desktop_server: str) -> None:
    ok = post_json(f"{desktop_server}/run_python", {"code": "print(6 * 7)"}).json()
    assert (ok["status"], ok["message"], ok["output"], ok["returncode"]) == ("success", "42\n", "42\n", 0)
    bad = post_json(f"{desktop_server}/run_python", {"code": "raise SystemExit('no')"}).json()
    assert bad["status"] == "error" and "no" in bad["error"]
    assert post_json(f"{desktop_server}/run_python", {}).status_code == 400


def test_execute_with_verification(desktop_server: str, desktop_session: DesktopSession) -> None:
    marker = desktop_session.home / "verified"
    ok = post_json(f"{desktop_server}/setup/execute_with_verification", {
        "command": f"sleep 0.3; touch {marker}", "shell": True,
        "verification": {"command_success": f"test -e {marker}"}, "max_wait_time": 10, "check_interval": 0.1,
    })
    assert ok.status_code == 200, ok.text
    assert ok.json()["status"] == "success" and ok.json()["verification"] == "passed"
    failed = post_json(f"{desktop_server}/setup/execute_with_verification", {
        "command": ["true"], "shell": False, "verification": {"window_exists": "no such window"},
        "max_wait_time": 1, "check_interval": 0.2,
    })
    assert failed.status_code == 500 and failed.json()["status"] == "verification_failed"


def test_accessibility_tree_or_clear_error(desktop_server: str) -> None:
    res = httpx.get(f"{desktop_server}/accessibility", timeout=60)
    if res.status_code == 200:  # the at-spi bindings are importable here
        assert res.json()["AT"].startswith("<desktop-frame")
    else:
        assert res.status_code == 500
        message = res.json()["message"]
        assert "pyatspi" in message and "\n" not in message
    terminal = httpx.get(f"{desktop_server}/terminal", timeout=30)
    assert terminal.status_code in (200, 500)
    assert "output" in terminal.json() or "pyatspi" in terminal.json()["message"]


def test_wallpaper(desktop_server: str, desktop_session: DesktopSession) -> None:
    if shutil.which("gsettings") is None:  # else GNOME's configured wallpaper may answer
        assert httpx.post(f"{desktop_server}/wallpaper").status_code == 404
    picture = desktop_session.home / "Pictures" / "wall.png"
    picture.parent.mkdir(exist_ok=True)
    buf = io.BytesIO()
    Image.new("RGB", (64, 40), (10, 200, 30)).save(buf, format="PNG")
    picture.write_bytes(buf.getvalue())
    res = post_json(f"{desktop_server}/setup/change_wallpaper", {"path": str(picture)})
    assert res.status_code == 200, res.text
    assert httpx.post(f"{desktop_server}/wallpaper").content == buf.getvalue()
    shot = Image.open(io.BytesIO(httpx.get(f"{desktop_server}/screenshot", timeout=30).content)).convert("RGB")
    assert shot.getpixel((SCREEN[0] - 5, SCREEN[1] - 5)) == (10, 200, 30)
    assert post_json(f"{desktop_server}/setup/change_wallpaper", {"path": "/no/such.png"}).status_code == 404


def test_open_file_missing_is_404(desktop_server: str) -> None:
    assert post_json(f"{desktop_server}/setup/open_file", {"path": "/no/such/file.docx"}).status_code == 404


def test_recording_without_ffmpeg_says_so(desktop_server: str) -> None:
    requires("no-ffmpeg")
    for route in ("/start_recording", "/end_recording"):
        res = httpx.post(f"{desktop_server}{route}")
        assert res.status_code == 501 and "ffmpeg" in res.json()["message"]


# desktop_env's own PythonController, run with OSWorld's environment (scripts/setup.sh osworld), against the server
CONTROLLER = """
import json, sys
from desktop_env.controllers.python import PythonController
ctl = PythonController(vm_ip="127.0.0.1", server_port=int(sys.argv[1]))
out = {"platform": ctl.get_vm_platform(), "size": ctl.get_vm_screen_size(),
       "png": ctl.get_screenshot()[:8].hex()}
ctl.execute_action({"action_type": "CLICK", "parameters": {"button": "left", "x": 40, "y": 50}})
desktop = ctl.get_vm_desktop_path()
out["desktop"] = desktop
print(json.dumps(out), flush=True)
sys.stdin.readline()  # the test writes a file on the desktop, then says go on
out = {"tree": ctl.get_vm_directory_tree(desktop)["children"],
       "file": ctl.get_file(desktop + "/note.txt").decode(),
       "bash": ctl.run_bash_script("echo hi", timeout=5),
       "python": ctl.run_python_script("print('py')")["status"]}
print(json.dumps(out), flush=True)
"""


def test_desktop_envs_own_python_controller(desktop_server: str, desktop_session: DesktopSession) -> None:
    from forge_cli.paths import env_python

    requires("osworld")
    python = env_python("osworld")
    port = desktop_server.rsplit(":", 1)[1]
    child = subprocess.Popen([str(python), "-c", CONTROLLER, port], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    try:
        assert child.stdout is not None and child.stdin is not None
        first = json.loads(child.stdout.readline())
        assert first["platform"] == "Linux" and first["size"] == {"width": SCREEN[0], "height": SCREEN[1]}
        assert bytes.fromhex(first["png"]) == b"\x89PNG\r\n\x1a\n"
        assert httpx.get(f"{desktop_server}/cursor_position").json() == [40, 50]
        (Path(first["desktop"]) / "note.txt").write_text("hello")
        child.stdin.write("go\n")
        child.stdin.flush()
        second = json.loads(child.stdout.readline())
    finally:
        child.kill()
        child.wait()
    assert second["tree"] == [{"name": "note.txt", "type": "file"}] and second["file"] == "hello"
    bash = second["bash"]
    assert (bash["status"], bash["output"], bash["returncode"]) == ("success", "hi\n", 0)
    assert second["python"] == "success"
