"""X11 helpers for the forge-desktop server: screen, pointer, screenshots, windows and the wallpaper.

python-xlib (Debian's python3-xlib) and Pillow (python3-pil) are imported inside the functions that need them, so
the server starts without them and only the routes that need them fail, with a MissingLibrary error naming what
to install. A fresh X connection is opened per call: python-xlib's Display is not safe to share between threads.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class MissingLibrary(RuntimeError):
    """A library a route needs is not importable (answered 500 with this one-line message)."""


# Window names and classes that tasks written for Ubuntu's Google Chrome use, and what Debian's Chromium (run as
# `google-chrome` in the image) shows instead; tried when the name itself matches no window.
WINDOW_ALIASES = {"google chrome": "chromium", "google-chrome": "chromium"}


@contextmanager
def _display() -> Iterator[Any]:
    try:
        from Xlib import display as xdisplay  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError as exc:
        raise MissingLibrary(f"python-xlib is not importable ({exc}); install python3-xlib") from exc
    d = xdisplay.Display()
    try:
        yield d
    finally:
        d.close()


def screen_size() -> tuple[int, int]:
    """The X screen's size in pixels (falls back to SCREEN_WIDTH/SCREEN_HEIGHT when X cannot be asked)."""
    try:
        with _display() as d:
            s = d.screen()
            return int(s.width_in_pixels), int(s.height_in_pixels)
    except MissingLibrary:
        return int(os.environ.get("SCREEN_WIDTH", "1920")), int(os.environ.get("SCREEN_HEIGHT", "1080"))


def cursor_position() -> tuple[int, int]:
    """The pointer's position on the root window."""
    with _display() as d:
        p = d.screen().root.query_pointer()
        return int(p.root_x), int(p.root_y)


# An arrow pointer, 12 x 19 pixels, tip at (0, 0): drawn black with a white rim, like a desktop's default cursor.
_ARROW = [(0, 0), (0, 16), (4, 12), (7, 18), (9, 17), (6, 11), (11, 11)]


def _grab() -> Any:
    """The whole screen as an RGB Pillow image: Pillow's XCB grab, then python-xlib, then scrot."""
    try:
        from PIL import Image, ImageGrab  # type: ignore[import-not-found,unused-ignore]
    except ImportError as exc:
        raise MissingLibrary(f"Pillow is not importable ({exc}); install python3-pil") from exc
    try:
        return ImageGrab.grab(xdisplay=os.environ.get("DISPLAY")).convert("RGB")
    except Exception:
        pass
    try:
        from Xlib import X  # type: ignore[import-not-found,import-untyped,unused-ignore]

        with _display() as d:
            root = d.screen().root
            geo = root.get_geometry()
            raw = root.get_image(0, 0, geo.width, geo.height, X.ZPixmap, 0xFFFFFFFF)
            return Image.frombytes("RGB", (geo.width, geo.height), raw.data, "raw", "BGRX")
    except Exception:
        pass
    if shutil.which("scrot") is None:
        raise RuntimeError("cannot capture the screen: Pillow's X grab and python-xlib failed and scrot is missing")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "shot.png")
        subprocess.run(["scrot", "--overwrite", path], check=True, timeout=20, capture_output=True)
        with Image.open(path) as img:
            return img.convert("RGB")


def screenshot_png() -> bytes:
    """A PNG of the whole screen with the mouse pointer drawn at its position (X screenshots leave it out)."""
    from PIL import ImageDraw  # type: ignore[import-not-found,unused-ignore]

    img = _grab()
    try:
        x, y = cursor_position()
    except Exception:
        x = y = -1
    if 0 <= x < img.width and 0 <= y < img.height:
        draw = ImageDraw.Draw(img)
        draw.polygon([(x + dx, y + dy) for dx, dy in _ARROW], fill=(0, 0, 0), outline=(255, 255, 255))
    buf = io.BytesIO()
    img.save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


# --- windows ---------------------------------------------------------------------------------------------------


def _prop(d: Any, win: Any, name: str) -> Any:
    try:
        p = win.get_full_property(d.intern_atom(name), 0)
    except Exception:
        return None
    return None if p is None else p.value


def _title(d: Any, win: Any) -> str:
    v = _prop(d, win, "_NET_WM_NAME")
    if v is None:
        v = _prop(d, win, "WM_NAME")
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v or "")


def _wm_class(d: Any, win: Any) -> tuple[str, str]:
    v = _prop(d, win, "WM_CLASS")
    if isinstance(v, str):
        v = v.encode()
    parts = (v or b"").split(b"\0")
    instance = parts[0].decode("utf-8", "replace") if parts else ""
    klass = parts[1].decode("utf-8", "replace") if len(parts) > 1 else ""
    return instance, klass


def _client_windows(d: Any) -> list[Any]:
    """Top-level application windows: the window manager's client list, else the root's mapped children."""
    root = d.screen().root
    ids = _prop(d, root, "_NET_CLIENT_LIST")
    if ids:
        return [d.create_resource_object("window", int(i)) for i in ids]
    from Xlib import X  # type: ignore[import-not-found,import-untyped,unused-ignore]

    found = []
    for w in root.query_tree().children:
        try:
            if w.get_attributes().map_state == X.IsViewable and (_title(d, w) or any(_wm_class(d, w))):
                found.append(w)
        except Exception:
            continue
    return found


def list_windows() -> list[dict[str, Any]]:
    """Application windows as {id, title, instance, class, x, y, width, height} (position on the screen)."""
    out = []
    with _display() as d:
        root = d.screen().root
        for w in _client_windows(d):
            try:
                geo = w.get_geometry()
                pos = w.translate_coords(root, 0, 0)
                out.append({
                    "id": int(w.id), "title": _title(d, w), "instance": _wm_class(d, w)[0],
                    "class": _wm_class(d, w)[1], "x": -int(pos.x), "y": -int(pos.y),
                    "width": int(geo.width), "height": int(geo.height),
                })
            except Exception:  # a window that vanished meanwhile
                continue
    return out


def _matches(win: dict[str, Any], name: str, strict: bool, by_class: bool) -> bool:
    fields = [win["instance"], win["class"]] if by_class else [win["title"]]
    if strict:
        return any(f == name for f in fields)
    return any(name.lower() in f.lower() for f in fields)


def find_windows(name: str, *, strict: bool = False, by_class: bool = False) -> list[dict[str, Any]]:
    """Windows whose title (or WM_CLASS with by_class) contains name (equals it with strict), case-insensitively
    unless strict; falls back to WINDOW_ALIASES (Google Chrome -> Chromium) when nothing matches."""
    wins = list_windows()
    hits = [w for w in wins if _matches(w, name, strict, by_class)]
    for alias, real in ([] if hits else WINDOW_ALIASES.items()):
        pattern = re.compile(re.escape(alias), re.IGNORECASE)
        if not pattern.search(name):
            continue
        for repl in (real, real.capitalize()):
            alt = pattern.sub(repl, name)
            hits = [w for w in wins if _matches(w, alt, strict, by_class)]
            if hits:
                return hits
    return hits


def _send_client_message(d: Any, win: Any, atom: str, data: list[int]) -> None:
    from Xlib import X  # type: ignore[import-not-found,import-untyped,unused-ignore]
    from Xlib.protocol import event  # type: ignore[import-not-found,import-untyped,unused-ignore]

    root = d.screen().root
    ev = event.ClientMessage(window=win, client_type=d.intern_atom(atom), data=(32, (data + [0] * 5)[:5]))
    root.send_event(ev, event_mask=X.SubstructureRedirectMask | X.SubstructureNotifyMask)


def activate_window(window_id: int) -> None:
    """Raise and focus a window: through the window manager (_NET_ACTIVE_WINDOW) when one runs, else directly."""
    from Xlib import X  # type: ignore[import-not-found,import-untyped,unused-ignore]

    with _display() as d:
        win = d.create_resource_object("window", window_id)
        if _prop(d, d.screen().root, "_NET_SUPPORTING_WM_CHECK"):
            _send_client_message(d, win, "_NET_ACTIVE_WINDOW", [2, X.CurrentTime, 0])
        else:
            win.map()
            win.configure(stack_mode=X.Above)
            win.set_input_focus(X.RevertToParent, X.CurrentTime)
        d.sync()


def close_window(window_id: int) -> None:
    """Ask a window to close (_NET_CLOSE_WINDOW, else WM_DELETE_WINDOW, else disconnect its client)."""
    from Xlib import X  # type: ignore[import-not-found,import-untyped,unused-ignore]
    from Xlib.protocol import event  # type: ignore[import-not-found,import-untyped,unused-ignore]

    with _display() as d:
        win = d.create_resource_object("window", window_id)
        if _prop(d, d.screen().root, "_NET_SUPPORTING_WM_CHECK"):
            _send_client_message(d, win, "_NET_CLOSE_WINDOW", [X.CurrentTime, 2])
        else:
            delete = d.intern_atom("WM_DELETE_WINDOW")
            protocols = win.get_wm_protocols() or []
            if delete in protocols:
                ev = event.ClientMessage(window=win, client_type=d.intern_atom("WM_PROTOCOLS"),
                                         data=(32, [delete, X.CurrentTime, 0, 0, 0]))
                win.send_event(ev)
            else:
                win.kill_client()
        d.sync()


# --- wallpaper -------------------------------------------------------------------------------------------------


def paint_wallpaper(path: str) -> None:
    """Paint an image, scaled to the screen, as the root window's background (there is no desktop shell)."""
    try:
        from PIL import Image  # type: ignore[import-not-found,unused-ignore]
        from Xlib import X  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError as exc:
        raise MissingLibrary(f"painting the wallpaper needs Pillow and python-xlib ({exc})") from exc
    with Image.open(path) as src, _display() as d:
        screen = d.screen()
        root = screen.root
        w, h = int(screen.width_in_pixels), int(screen.height_in_pixels)
        img = src.convert("RGB").resize((w, h))
        depth = int(screen.root_depth)
        pixmap = root.create_pixmap(w, h, depth)
        gc = pixmap.create_gc()
        data = img.tobytes("raw", "BGRX")
        rows = max(1, 200_000 // (w * 4))  # keep each PutImage request well under the X request size limit
        for top in range(0, h, rows):
            n = min(rows, h - top)
            pixmap.put_image(gc, 0, top, w, n, X.ZPixmap, depth, 0, data[top * w * 4:(top + n) * w * 4])
        root.change_attributes(background_pixmap=pixmap)
        root.clear_area(0, 0, w, h)
        gc.free()
        pixmap.free()
        d.sync()
