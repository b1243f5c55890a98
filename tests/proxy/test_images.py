"""Images in records stored once (``forge_cli/traces/blobs.py``): the four wire formats' inline image shapes taken
out and given back exactly; a 50-call rollout sending the same 200 KB screenshot each call grows the store by about
one screenshot; ``forge traces show`` / export and a remote pull give the images back."""

from __future__ import annotations

import base64
import json
import os
import secrets
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest

from forge_cli.proxy.client import RemoteProxy
from forge_cli.proxy.launcher import start_proxy
from forge_cli.traces import blobs
from tests.helpers import forge
from tests.proxy.conftest import FakeUpstream, need_mitmdump


def _png(size: int, seed: int = 0) -> str:
    return base64.b64encode(bytes((i * 7 + seed) % 256 for i in range(size))).decode()


def _bodies(image: str) -> dict[str, Any]:
    return {
        "chat": {"model": "m", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is on the screen?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}}]}]},
        "responses": {"model": "m", "input": [{"role": "user", "content": [
            {"type": "input_text", "text": "describe"},
            {"type": "input_image", "image_url": f"data:image/jpeg;base64,{image}"}]}]},
        "anthropic": {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": image}},
            {"type": "text", "text": "describe"}]}]},
        "gemini": {"contents": [{"role": "user", "parts": [
            {"inlineData": {"mimeType": "image/webp", "data": image}}, {"text": "describe"}]}]},
    }


@pytest.mark.parametrize("wire", ["chat", "responses", "anthropic", "gemini"])
def test_each_format_images_out_and_back(wire: str) -> None:
    image = _png(3000)
    body = _bodies(image)[wire]
    found: blobs.Blobs = {}
    stored = blobs.extract(json.dumps(body), found)
    assert stored is not None and image not in stored and blobs.PREFIX in stored
    assert len(found) == 1
    (digest, (mime, _raw)), = found.items()
    assert mime.startswith("image/") and blobs.refs(stored) == {digest}
    assert blobs.resolve(json.loads(stored), lambda d: found[d][1] if d in found else None) == body


def test_small_strings_and_other_text_stay() -> None:
    found: blobs.Blobs = {}
    small = json.dumps(_bodies(_png(100))["chat"])
    assert blobs.extract(small, found) == small and not found
    long_text = json.dumps({"messages": [{"role": "user", "content": "data: " + "x" * 5000}]})
    assert blobs.extract(long_text, found) == long_text and not found
    assert blobs.extract("not json data:" + "y" * 2000, found) == "not json data:" + "y" * 2000


@pytest.mark.mitm
def test_same_screenshot_fifty_times_is_stored_once(fake_upstream: FakeUpstream, tmp_path: Path) -> None:
    need_mitmdump()
    screenshot = _png(150_000)  # 200 KB of base64
    assert 195_000 < len(screenshot) < 205_000
    token = secrets.token_urlsafe(32)
    store = tmp_path / "traces.sqlite"
    with start_proxy(fake_upstream.url, store=store, admin_token=token) as proxy:
        reg = proxy.register("shots", task="t")
        for turn in range(50):
            body = _bodies(screenshot)["chat"]
            body["messages"][0]["content"][0]["text"] = f"turn {turn}"
            answer = httpx.post(f"{proxy.url}/r/shots/v1/chat/completions", json=body, timeout=30,
                                headers={"authorization": f"Bearer {reg['key']}"})
            assert answer.status_code == 200, answer.text
        remote = RemoteProxy(url=proxy.url, admin_token=token, store=tmp_path / "run" / "traces.sqlite")
        remote.finish("shots", "ok")  # pulls the rows and the one image into another store
    # after the proxy stopped, its writer checkpointed the WAL into the file: the store is what stays on disk
    size = os.path.getsize(store)
    assert size < 1_000_000, f"the store is {size} bytes for 50 calls of one {len(screenshot)} B image (10 MB inline)"
    with sqlite3.connect(store) as db:
        # the base64 text once (its data: head stays in each record)
        assert db.execute("SELECT COUNT(*), SUM(LENGTH(data)) FROM blobs").fetchone() == (1, len(screenshot))
        assert db.execute("SELECT COUNT(*) FROM calls WHERE request LIKE '%forge-blob:sha256:%'").fetchone()[0] == 50
    shown = forge("traces", "show", "shots", "--store", str(store), "--json")
    assert shown.returncode == 0, shown.stderr
    records = json.loads(shown.stdout)
    assert len(records) == 50
    assert all(r["request"]["messages"][0]["content"][1]["image_url"]["url"] == f"data:image/png;base64,{screenshot}"
               for r in records), "traces show gives the image back as the client sent it"
    pulled = forge("traces", "export", str(tmp_path / "out.jsonl"), "--store", str(tmp_path / "run" / "traces.sqlite"))
    assert pulled.returncode == 0, pulled.stderr
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(lines) == 50 and screenshot in json.dumps(lines[-1]["request"]), "the pulled copy resolves too"
