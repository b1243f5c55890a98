#!/usr/bin/env python3
"""forge-desktop's in-desktop HTTP server: a clean-room implementation of OSWorld's in-VM HTTP contract.

OSWorld's host side (the `desktop-env` package: PythonController, SetupController and the evaluators' getters)
drives its VM through an HTTP server inside it. forge runs a Debian container instead of the VM, and this is
forge's own server for that contract, derived from how the host side calls it (routes, methods, form vs JSON
bodies, field names, status codes, response shapes); no OSWorld code is used. Standard library only (plus, loaded
by the routes that need them, python-xlib, Pillow and gi's Atspi; a route whose library is missing answers 500
with a one-line reason). Listens on 127.0.0.1:--port (5000); commands run as the server's user with its DISPLAY.

Routes (JSON bodies unless noted; errors are JSON {"status": "error", "message", "error"}):
  GET  /screenshot        PNG of the whole screen with the mouse pointer drawn in
  GET  /accessibility     {"AT": XML of the at-spi tree in OSWorld's layout (a11y.py)}; 500 without at-spi
  GET  /terminal          {"output": text of a terminal's at-spi node or null, "status": "success"}
  POST /execute           {command: str|list, shell: bool, timeout?} -> {status, output, error, returncode};
                          500 when the command cannot start or times out (default limit 120 s)
  POST /setup/execute     the same as /execute
  POST /setup/execute_with_verification
                          {command, shell, verification: {window_exists?, command_success?}, max_wait_time,
                          check_interval} -> {status: "success", verification: "passed", wait_time, output,
                          error, returncode}; 500 {status: "verification_failed", ...} when not verified in time
  POST /setup/launch      {command, shell} -> text "... launched successfully" (runs in the background)
  POST /setup/upload      multipart form file_path + file file_data -> text; writes the file (parents made)
  POST /setup/open_file   {path, timeout?} -> text once a window titled with the file's name shows; 404 missing
  POST /setup/activate_window, /setup/close_window
                          {window_name, strict, by_class} -> text; 404 when no window matches
  POST /setup/change_wallpaper  {path} -> text; paints it on the root window and remembers it for /wallpaper
  POST /file              form file_path -> the file's bytes; 404 when it is not a file
  POST /list_directory    {path} -> {"directory_tree": {name, type: "directory", children: [...]}}; 404 / 400
  POST /screen_size       -> {"width", "height"}
  POST /window_size       form app_class_name -> {"width", "height"} of a window of that WM_CLASS; 404 none
  POST /desktop_path      -> {"desktop_path": "~/Desktop" expanded}
  POST /wallpaper         -> the wallpaper image's bytes; 404 when none was set
  GET  /platform          text "Linux"
  GET  /cursor_position   JSON [x, y]
  POST /run_python        {code, timeout?} -> {status: success|error, message, output, error, returncode}
  POST /run_bash_script   {script, timeout (30), working_dir?} -> {status: success|error, output, error,
                          returncode}; a timeout answers status "error", returncode -1
  POST /start_recording, /end_recording
                          screen recording with ffmpeg (end returns the MP4); 501 when ffmpeg is not installed
Read-only routes answer GET and POST alike.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import a11y
import desktop
import procs
import recording
from httpio import (
    BadRequest,
    Request,
    Response,
    error_response,
    file_response,
    json_response,
    read_body,
    text_response,
)

Handler = Callable[[Request], Response]
ROUTES: dict[tuple[str, str], Handler] = {}
_STATE: dict[str, Any] = {"wallpaper": None}


def route(path: str, *methods: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for method in methods or ("POST",):
            ROUTES[(method, path)] = fn
        return fn

    return register


def _path_field(value: Any, what: str = "path") -> str:
    if not isinstance(value, str) or not value:
        raise BadRequest(f"missing {what}")
    return os.path.abspath(os.path.expanduser(value))


# --- observation -----------------------------------------------------------------------------------------------


@route("/screenshot", "GET", "POST")
def screenshot(_: Request) -> Response:
    return Response(200, desktop.screenshot_png(), "image/png")


@route("/accessibility", "GET", "POST")
def accessibility(_: Request) -> Response:
    return json_response({"AT": a11y.accessibility_tree_xml()})


@route("/terminal", "GET", "POST")
def terminal(_: Request) -> Response:
    return json_response({"output": a11y.terminal_text(), "status": "success"})


@route("/platform", "GET", "POST")
def platform_name(_: Request) -> Response:
    return text_response(platform.system())


@route("/cursor_position", "GET", "POST")
def cursor_position(_: Request) -> Response:
    return json_response(list(desktop.cursor_position()))


@route("/screen_size", "GET", "POST")
def screen_size(_: Request) -> Response:
    width, height = desktop.screen_size()
    return json_response({"width": width, "height": height})


@route("/window_size", "GET", "POST")
def window_size(req: Request) -> Response:
    name = req.form().get("app_class_name") or ""
    if not name:
        raise BadRequest("missing app_class_name")
    wins = desktop.find_windows(name, by_class=True)
    if not wins:
        return error_response(f"no window of class {name!r}", 404)
    return json_response({"width": wins[0]["width"], "height": wins[0]["height"]})


@route("/desktop_path", "GET", "POST")
def desktop_path(_: Request) -> Response:
    return json_response({"desktop_path": os.path.expanduser("~/Desktop")})


@route("/wallpaper", "GET", "POST")
def wallpaper(_: Request) -> Response:
    path = _STATE["wallpaper"]
    if not path and shutil.which("gsettings"):
        got = procs.run(["gsettings", "get", "org.gnome.desktop.background", "picture-uri"], shell=False, timeout=5)
        uri = str(got["output"]).strip().strip("'")
        path = uri[len("file://"):] if uri.startswith("file://") else None
    if not path or not os.path.isfile(path):
        return error_response("no wallpaper has been set", 404)
    return file_response(path)


# --- files -----------------------------------------------------------------------------------------------------


@route("/file")
def get_file(req: Request) -> Response:
    path = _path_field(req.form().get("file_path"), "file_path")
    if not os.path.isfile(path):
        return error_response(f"file not found: {path}", 404)
    return file_response(path)


@route("/setup/upload")
def upload(req: Request) -> Response:
    path = _path_field(req.form().get("file_path"), "file_path")
    upload_ = req.files().get("file_data")
    if upload_ is None:
        raise BadRequest("missing file_data")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.forge-upload-{os.getpid()}-{threading.get_ident()}"
    with open(tmp, "wb") as f:
        f.write(upload_.data)
    os.replace(tmp, path)
    return text_response(f"File uploaded successfully: {path} ({len(upload_.data)} bytes)")


def _tree(path: str, depth: int, budget: list[int]) -> dict[str, Any]:
    node: dict[str, Any] = {"name": os.path.basename(path.rstrip("/")) or path, "type": "directory", "children": []}
    try:
        entries = sorted(os.scandir(path), key=lambda e: e.name)
    except OSError:
        return node
    for entry in entries:
        budget[0] -= 1
        if budget[0] < 0:
            break
        if entry.is_dir(follow_symlinks=False) and depth < 16:
            node["children"].append(_tree(entry.path, depth + 1, budget))
        else:
            node["children"].append({"name": entry.name, "type": "file"})
    return node


@route("/list_directory")
def list_directory(req: Request) -> Response:
    path = _path_field(req.json().get("path"))
    if not os.path.exists(path):
        return error_response(f"directory not found: {path}", 404)
    if not os.path.isdir(path):
        return error_response(f"not a directory: {path}", 400)
    return json_response({"directory_tree": _tree(path, 0, [20000])})


# --- commands --------------------------------------------------------------------------------------------------


@route("/execute")
@route("/setup/execute")
def execute(req: Request) -> Response:
    data = req.json()
    shell = bool(data.get("shell", False))
    command = procs.normalize_command(data.get("command"), shell)
    try:
        result = procs.run(command, shell=shell, timeout=procs.clamp_timeout(data.get("timeout")))
    except OSError as exc:
        return error_response(f"cannot run command: {exc}", 500)
    timed_out = result.pop("timed_out")
    return json_response(result, 500 if timed_out else 200)


def _verified(verification: dict[str, Any]) -> bool:
    name = verification.get("window_exists")
    if name and not desktop.find_windows(str(name)):
        return False
    check = verification.get("command_success")
    if check:
        shell = isinstance(check, str)
        res = procs.run(procs.normalize_command(check, shell), shell=shell, timeout=10)
        if res["returncode"] != 0:
            return False
    return True


@route("/setup/execute_with_verification")
def execute_with_verification(req: Request) -> Response:
    data = req.json()
    shell = bool(data.get("shell", False))
    command = procs.normalize_command(data.get("command"), shell)
    verification = data.get("verification") or {}
    if not isinstance(verification, dict):
        raise BadRequest("verification must be an object")
    max_wait = procs.clamp_timeout(data.get("max_wait_time"), 10.0)
    interval = procs.clamp_timeout(data.get("check_interval"), 1.0)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(command, shell=shell, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    start_new_session=True)
        except OSError as exc:
            return error_response(f"cannot run command: {exc}", 500)
        threading.Thread(target=proc.wait, daemon=True).start()
        ok, waited = procs.wait_until(
            lambda: _verified(verification) if verification else proc.poll() is not None, max_wait, interval)
        out.seek(0)
        err.seek(0)
        result = {"output": out.read(1 << 20).decode("utf-8", "replace"),
                  "error": err.read(1 << 20).decode("utf-8", "replace"),
                  "returncode": proc.poll(), "wait_time": round(waited, 3)}
    if ok:
        return json_response({"status": "success", "verification": "passed", **result})
    message = f"verification {verification or 'command exit'} not met within {max_wait:g} seconds"
    return json_response({"status": "verification_failed", "message": message, **result}, 500)


@route("/setup/launch")
def launch(req: Request) -> Response:
    data = req.json()
    shell = bool(data.get("shell", False))
    command = procs.normalize_command(data.get("command"), shell)
    try:
        pid = procs.launch(command, shell=shell)
    except OSError as exc:
        return error_response(f"cannot launch {command!r}: {exc}", 500)
    return text_response(f"{command} launched successfully (pid {pid})")


@route("/run_python")
def run_python(req: Request) -> Response:
    data = req.json()
    code = data.get("code")
    if not isinstance(code, str) or not code.strip():
        raise BadRequest("missing code")
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(code)
    try:
        res = procs.run([procs.python_executable(), f.name], shell=False, cwd=os.path.expanduser("~"),
                        timeout=procs.clamp_timeout(data.get("timeout"), 85.0))
    finally:
        os.unlink(f.name)
    ok = res["returncode"] == 0
    res["status"] = "success" if ok else "error"
    res["message"] = res["output"] if ok else res.get("message") or "Python script failed"
    res.pop("timed_out")
    return json_response(res)


@route("/run_bash_script")
def run_bash_script(req: Request) -> Response:
    data = req.json()
    script = data.get("script")
    if not isinstance(script, str) or not script.strip():
        raise BadRequest("missing script")
    cwd = os.path.expanduser(data.get("working_dir") or "~")
    if not os.path.isdir(cwd):
        return error_response(f"working_dir is not a directory: {cwd}", 400)
    timeout = procs.clamp_timeout(data.get("timeout"), 30.0)
    res = procs.run(["/bin/bash", "-c", script], shell=False, cwd=cwd, timeout=timeout)
    if res.pop("timed_out"):
        res["error"] = f"Script execution timed out after {timeout:g} seconds"
    res["status"] = "success" if res["returncode"] == 0 else "error"
    res.pop("message", None)
    return json_response(res)


# --- windows and files on screen -------------------------------------------------------------------------------


def _window_args(req: Request) -> tuple[str, bool, bool]:
    data = req.json()
    name = data.get("window_name")
    if not isinstance(name, str) or not name:
        raise BadRequest("missing window_name")
    return name, bool(data.get("strict", False)), bool(data.get("by_class", False))


@route("/setup/activate_window")
def activate_window(req: Request) -> Response:
    name, strict, by_class = _window_args(req)
    wins = desktop.find_windows(name, strict=strict, by_class=by_class)
    if not wins:
        return error_response(f"window not found: {name}", 404)
    desktop.activate_window(wins[0]["id"])
    return text_response(f"Window activated successfully: {wins[0]['title']}")


@route("/setup/close_window")
def close_window(req: Request) -> Response:
    name, strict, by_class = _window_args(req)
    wins = desktop.find_windows(name, strict=strict, by_class=by_class)
    if not wins:
        return error_response(f"window not found: {name}", 404)
    for win in wins:
        desktop.close_window(win["id"])
    return text_response(f"Window closed successfully: {', '.join(w['title'] for w in wins)}")


@route("/setup/open_file")
def open_file(req: Request) -> Response:
    data = req.json()
    path = _path_field(data.get("path"))
    if not os.path.exists(path):
        return error_response(f"file not found: {path}", 404)
    opener = shutil.which("xdg-open") or shutil.which("gio")
    if opener is None:
        return error_response("cannot open files: neither xdg-open nor gio is installed", 501)
    procs.launch([opener, path] if opener.endswith("xdg-open") else [opener, "open", path], shell=False)
    base = os.path.basename(path)
    stem = os.path.splitext(base)[0]
    timeout = procs.clamp_timeout(data.get("timeout"), 120.0)

    def shown() -> bool:
        return any(base.lower() in w["title"].lower() or stem.lower() in w["title"].lower()
                   for w in desktop.list_windows())

    ok, waited = procs.wait_until(shown, timeout, 0.5)
    if not ok:
        return error_response(f"no window for {base} appeared within {timeout:g} seconds", 500)
    return text_response(f"File opened successfully: {path} (window after {waited:.1f} s)")


@route("/setup/change_wallpaper")
def change_wallpaper(req: Request) -> Response:
    path = _path_field(req.json().get("path"))
    if not os.path.isfile(path):
        return error_response(f"file not found: {path}", 404)
    desktop.paint_wallpaper(path)
    _STATE["wallpaper"] = path
    return text_response(f"Wallpaper changed to {path}")


# --- recording -------------------------------------------------------------------------------------------------


@route("/start_recording")
def start_recording(_: Request) -> Response:
    recording.start(*desktop.screen_size())
    return text_response("Recording started")


@route("/end_recording")
def end_recording(_: Request) -> Response:
    return file_response(recording.stop())


# --- HTTP plumbing ---------------------------------------------------------------------------------------------


def dispatch(req: Request) -> Response:
    handler = ROUTES.get((req.method, req.path))
    if handler is None:
        if any(path == req.path for _, path in ROUTES):
            return error_response(f"method {req.method} not allowed on {req.path}", 405)
        return error_response(f"no such route: {req.path}", 404)
    try:
        return handler(req)
    except (BadRequest, procs.CommandError, recording.RecordingError) as exc:
        return error_response(str(exc), 400)
    except recording.NotSupported as exc:
        return error_response(str(exc), 501)
    except (desktop.MissingLibrary, a11y.A11yUnavailable) as exc:
        return error_response(str(exc), 500)
    except Exception as exc:
        return error_response(f"{req.path} failed: {type(exc).__name__}: {exc}", 500)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "forge-desktop/1"

    def _handle(self) -> None:
        url = urlsplit(self.path)
        try:
            body = read_body(self.rfile, self.headers)
        except (BadRequest, ValueError) as exc:
            self.close_connection = True
            self._send(error_response(f"bad request body: {exc}", 400))
            return
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        req = Request(self.command, url.path.rstrip("/") or "/", query, self.headers.get("Content-Type", ""), body)
        self._send(dispatch(req))

    def _send(self, resp: Response) -> None:
        size = os.path.getsize(resp.file_path) if resp.file_path else len(resp.body)
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.content_type)
        self.send_header("Content-Length", str(size))
        for key, value in resp.headers.items():
            self.send_header(key, value)
        self.end_headers()
        if self.command == "HEAD":
            return
        if resp.file_path:
            with open(resp.file_path, "rb") as f:
                shutil.copyfileobj(f, self.wfile, 1 << 20)
        else:
            self.wfile.write(resp.body)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _handle

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write(f"{time.strftime('%H:%M:%S')} {self.address_string()} {format % args}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=5000)
    args = parser.parse_args(argv)
    ThreadingHTTPServer.allow_reuse_address = True
    ThreadingHTTPServer.daemon_threads = True
    server = ThreadingHTTPServer((args.host, args.port), _Handler)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    sys.stderr.write(f"forge-desktop server on http://{args.host}:{args.port} (DISPLAY={os.environ.get('DISPLAY')})\n")
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
