"""Screen recording for /start_recording and /end_recording: ffmpeg's x11grab when ffmpeg is installed.

The image ships no ffmpeg, so there the routes answer 501 with NotSupported's message.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from typing import Any

RECORDING_PATH = os.path.join(tempfile.gettempdir(), "forge-desktop-recording.mp4")
_LOCK = threading.Lock()
_PROC: list[subprocess.Popen[Any]] = []


class NotSupported(RuntimeError):
    """Recording cannot work here (answered 501)."""


class RecordingError(RuntimeError):
    """Recording is in the wrong state for the request (answered 400)."""


def _ffmpeg() -> str:
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        raise NotSupported("screen recording is not supported: ffmpeg is not installed in this desktop")
    return ffmpeg


def start(width: int, height: int) -> None:
    """Start recording the whole screen to RECORDING_PATH (10 frames a second, H.264)."""
    ffmpeg = _ffmpeg()
    with _LOCK:
        if _PROC and _PROC[0].poll() is None:
            raise RecordingError("a recording is already running")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(RECORDING_PATH)
        _PROC[:] = [subprocess.Popen(
            [ffmpeg, "-y", "-loglevel", "error", "-f", "x11grab", "-video_size", f"{width}x{height}",
             "-framerate", "10", "-i", os.environ.get("DISPLAY", ":0"), "-c:v", "libx264", "-preset", "ultrafast",
             "-pix_fmt", "yuv420p", RECORDING_PATH],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)]


def stop() -> str:
    """Stop the running recording and return the path of its MP4."""
    _ffmpeg()
    with _LOCK:
        if not _PROC:
            raise RecordingError("no recording is running")
        proc = _PROC.pop()
    proc.send_signal(signal.SIGINT)  # ffmpeg finishes the file on SIGINT
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if not os.path.isfile(RECORDING_PATH):
        raise RecordingError("the recording produced no file")
    return RECORDING_PATH
