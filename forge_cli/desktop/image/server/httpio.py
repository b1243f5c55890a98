"""Request bodies and responses for the forge-desktop server (stdlib only).

Bodies come as JSON (`application/json`), URL-encoded forms or multipart forms (what requests-toolbelt's
MultipartEncoder sends for /setup/upload); a body may have a Content-Length or be chunked.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from email.message import Message
from typing import Any
from urllib.parse import parse_qs

# The largest request body accepted (uploads of task files: videos, office documents, browser profiles).
MAX_BODY_BYTES = 2 * 1024**3


class BadRequest(ValueError):
    """A malformed request (answered 400 with this message)."""


@dataclass
class Upload:
    filename: str
    data: bytes


@dataclass
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    file_path: str | None = None  # stream this file instead of body
    headers: dict[str, str] = field(default_factory=dict)


def json_response(payload: Any, status: int = 200) -> Response:
    return Response(status, json.dumps(payload).encode(), "application/json")


def text_response(text: str, status: int = 200) -> Response:
    return Response(status, text.encode(), "text/plain; charset=utf-8")


def error_response(message: str, status: int, **extra: Any) -> Response:
    """A JSON error: {"status": "error", "message": ..., "error": ...} (OSWorld's host reads either key)."""
    return json_response({"status": "error", "message": message, "error": message, **extra}, status)


def file_response(path: str) -> Response:
    return Response(200, b"", "application/octet-stream", file_path=path,
                    headers={"Content-Disposition": f'attachment; filename="{os.path.basename(path)}"'})


def _media_type(content_type: str) -> tuple[str, dict[str, str]]:
    msg = Message()
    msg["Content-Type"] = content_type or "application/octet-stream"
    params = {k.lower(): v for k, v in msg.get_params(failobj=[])[1:]}
    return msg.get_content_type(), {k: str(v) for k, v in params.items()}


def read_body(rfile: Any, headers: Any) -> bytes:
    """The request body: Content-Length bytes, or the chunks of a chunked body."""
    if "chunked" in (headers.get("Transfer-Encoding") or "").lower():
        chunks: list[bytes] = []
        total = 0
        while True:
            line = rfile.readline(1024)
            if not line:
                raise BadRequest("truncated chunked body")
            size = int(line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(chunks)
            total += size
            if total > MAX_BODY_BYTES:
                raise BadRequest("request body too large")
            chunks.append(rfile.read(size))
            rfile.readline(1024)
    length = int(headers.get("Content-Length") or 0)
    if length < 0 or length > MAX_BODY_BYTES:
        raise BadRequest("bad Content-Length")
    return rfile.read(length) if length else b""


def parse_multipart(body: bytes, boundary: str) -> tuple[dict[str, str], dict[str, Upload]]:
    """A multipart/form-data body's plain fields and file fields."""
    if not boundary:
        raise BadRequest("multipart body without a boundary")
    fields: dict[str, str] = {}
    files: dict[str, Upload] = {}
    delimiter = b"--" + boundary.encode("latin-1")
    parts = body.split(delimiter)
    for part in parts[1:]:
        if part.startswith(b"--"):
            break  # the closing delimiter
        part = part[2:] if part.startswith(b"\r\n") else part
        head, sep, content = part.partition(b"\r\n\r\n")
        if not sep:
            raise BadRequest("malformed multipart part")
        if content.endswith(b"\r\n"):
            content = content[:-2]
        msg = Message()
        for line in head.decode("utf-8", "replace").split("\r\n"):
            key, colon, value = line.partition(":")
            if colon:
                msg[key.strip()] = value.strip()
        name = msg.get_param("name", header="content-disposition")
        filename = msg.get_param("filename", header="content-disposition")
        if not isinstance(name, str):
            continue
        if isinstance(filename, str):
            files[name] = Upload(filename, content)
        else:
            fields[name] = content.decode("utf-8", "replace")
    return fields, files


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    content_type: str
    body: bytes

    def json(self) -> dict[str, Any]:
        """The body as a JSON object ({} when empty); a form body is accepted too, as its fields."""
        if not self.body.strip():
            return {}
        media, _ = _media_type(self.content_type)
        if media in ("application/x-www-form-urlencoded", "multipart/form-data"):
            return dict(self.form())
        try:
            data = json.loads(self.body)
        except ValueError as exc:
            raise BadRequest(f"body is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise BadRequest("JSON body must be an object")
        return data

    def form(self) -> dict[str, str]:
        """URL-encoded or multipart form fields (plus the query string's); a JSON object body is accepted too."""
        fields = dict(self.query)
        media, params = _media_type(self.content_type)
        if media == "multipart/form-data":
            fields.update(parse_multipart(self.body, params.get("boundary", ""))[0])
        elif media == "application/json" and self.body.strip():
            data = self.json()
            fields.update({k: v if isinstance(v, str) else json.dumps(v) for k, v in data.items()})
        elif self.body:
            parsed = parse_qs(self.body.decode("utf-8", "replace"), keep_blank_values=True)
            fields.update({k: v[-1] for k, v in parsed.items()})
        return fields

    def files(self) -> dict[str, Upload]:
        media, params = _media_type(self.content_type)
        if media != "multipart/form-data":
            return {}
        return parse_multipart(self.body, params.get("boundary", ""))[1]
