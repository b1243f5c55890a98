"""Screenshots through the real path: a vision-language policy on vLLM (CPU), the capture proxy, the store.

A tiny random-weight Idefics3 checkpoint (``tests/proxy/tiny_vlm.py``, built here with transformers, nothing
downloaded) is served by forge's ``start_server``; one request with the same screenshot goes through each of the
four wire formats. Each call is answered, its record's prompt token ids hold vLLM's image placeholders (the image
reached the model as an image, not as text), and the store keeps the screenshot once for all four calls.
"""

from __future__ import annotations

import base64
import json
import secrets
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from forge_cli.proxy.launcher import start_proxy
from forge_cli.traces import blobs
from tests.proxy.conftest import need_mitmdump
from tests.proxy.test_images import _bodies
from tests.requires import requires

# a second vLLM server for the vision model (~65 s to start on 2 cores): make test-e2e, keeping make test under 40 min
pytestmark = [pytest.mark.e2e, pytest.mark.vllm, pytest.mark.mitm]
BUILDER = Path(__file__).with_name("tiny_vlm.py")
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "anthropic": "/v1/messages",
         "gemini": "/v1beta/models/policy:generateContent"}


def _screenshot() -> str:
    """A 64x64 RGB PNG, base64 (made with the standard library: zlib and PNG's chunk format)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + bytes(v for x in range(64) for v in (x * 4, y * 4, (x + y) * 2)) for y in range(64))
    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 64, 64, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
    return base64.b64encode(png).decode()


@pytest.fixture(scope="module")
def vlm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from forge_cli.config.compose import compose
    from forge_cli.paths import env_python
    from forge_cli.serve import start_server
    from forge_cli.serve.prepare import prepare_default_model

    requires("vllm")
    python = env_python("vllm")
    root = tmp_path_factory.mktemp("tiny-vlm")
    model_dir = root / "model"
    tokenizer_dir = prepare_default_model(compose([]).experiment.model.package).path  # type: ignore[union-attr]
    subprocess.run([str(python), str(BUILDER), str(tokenizer_dir), str(model_dir)], check=True, timeout=300,
                   capture_output=True)
    model = compose(["model=vllm", "model.device=cpu", f"model.path={model_dir}", "model.dtype=float32",
                     "model.max_model_len=2048", "model.max_output_tokens=8", "model.tool_call_parser=null",
                     f"model.chat_template={model_dir / 'chat_template.jinja'}"]).experiment.model
    server = start_server(model, port=0, log_path=root / "vllm.log", timeout=900)
    try:
        yield server
    finally:
        server.stop()


def test_a_screenshot_through_each_wire_format_is_seen_by_the_model_and_stored_once(
        vlm_server: Any, tmp_path: Path) -> None:
    need_mitmdump()
    image = _screenshot()
    image_token = json.loads((Path(vlm_server.launch.model_path) / "config.json").read_text())["image_token_id"]
    store = tmp_path / "traces.sqlite"
    with start_proxy(vlm_server.url, store=store, admin_token=secrets.token_urlsafe(32)) as proxy:
        reg = proxy.register("shots", task="t")
        for wire, body in _bodies(image).items():
            if wire != "gemini":
                body["model"] = "policy"
            body["max_tokens" if wire in ("chat", "anthropic") else "max_output_tokens"] = 4
            if wire == "gemini":
                body.pop("max_output_tokens")
                body["generationConfig"] = {"maxOutputTokens": 4}
            answer = httpx.post(f"{proxy.url}/r/shots{PATHS[wire]}", json=body, timeout=300,
                                headers={"authorization": f"Bearer {reg['key']}", "x-goog-api-key": reg["key"]})
            assert answer.status_code == 200, (wire, answer.text[:500])
        proxy.finish("shots")
    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT wire_format, status, prompt_token_ids, request FROM calls ORDER BY seq").fetchall()
        stored = db.execute("SELECT COUNT(*) FROM blobs").fetchone()[0]
    assert [r[0] for r in rows] == ["chat", "responses", "anthropic", "gemini"]
    for wire, status, prompt_ids, request in rows:
        assert status == "ok", wire
        assert json.loads(prompt_ids).count(image_token) >= 4, f"{wire}: the model saw the image as its tokens"
        assert image not in request and blobs.PREFIX in request, f"{wire}: the record holds a reference"
    assert stored == 1, "one screenshot, four calls: stored once"


def _browser_screenshot(tmp_path: Path) -> str | None:
    """A screenshot of a page in forge's own headless Chromium (None when Chromium is not installed)."""
    import asyncio
    import shutil

    from forge_cli.browser import cdp
    from forge_cli.browser.chromium import Chromium

    if shutil.which("chromium") is None:
        return None

    async def shoot() -> bytes:
        browser = await Chromium.start("chromium", tmp_path / "browser.log",
                                       "data:text/html,<h1>Widget shop</h1><a href='/blue'>Blue widget</a>")
        try:
            for _ in range(100):
                if await cdp.evaluate(browser.cdp_url, "document.readyState") == "complete":
                    break
                await asyncio.sleep(0.05)
            return await cdp.screenshot(browser.cdp_url)
        finally:
            await browser.stop()

    return base64.b64encode(asyncio.run(shoot())).decode()


def test_screenshot_calls_become_vision_language_samples_that_train(vlm_server: Any, tmp_path: Path) -> None:
    """Two rollouts of a screenshot task (one rewarded) through the proxy: their records become samples with the
    image beside the token ids that hold its placeholders, the local trainer computes the rollout's logprobs of the
    sampled tokens from the image's pixel values (as vLLM did), and one update raises the rewarded completion's
    logprob."""
    import torch

    from forge_cli.config.compose import compose
    from forge_cli.rollout.reader import RunRollout
    from forge_cli.rollout.result import RolloutResult
    from forge_cli.traces.store import iter_calls, open_store, resolve_record
    from forge_cli.train.local import LocalTrainer
    from forge_cli.train.samples import SamplePolicy, build_batch

    need_mitmdump()
    shot = _browser_screenshot(tmp_path) or _screenshot()
    model_dir = Path(vlm_server.launch.model_path)
    image_token = json.loads((model_dir / "config.json").read_text())["image_token_id"]
    store = tmp_path / "traces.sqlite"
    with start_proxy(vlm_server.url, store=store, admin_token=secrets.token_urlsafe(32)) as proxy:
        for rollout in ("good", "bad"):
            reg = proxy.register(rollout, task="shop", group_id="g")
            body = {"model": "policy", "max_tokens": 6, "temperature": 1.0, "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{shot}"}},
                {"type": "text", "text": "What does the page show?"}]}]}
            answer = httpx.post(f"{proxy.url}/r/{rollout}/v1/chat/completions", json=body, timeout=300,
                                headers={"authorization": f"Bearer {reg['key']}"})
            assert answer.status_code == 200, answer.text[:500]
            proxy.finish(rollout)
    conn = open_store(store, readonly=True)
    rollouts = [RunRollout(RolloutResult(rollout_id=rid, task_id="shop", group_id="g", harness="browse",
                                         status="ok", reward=reward),
                           [resolve_record(conn, c) for c in iter_calls(conn, rid)])
                for rid, reward in (("good", 1.0), ("bad", 0.0))]
    conn.close()
    batch = build_batch(rollouts, SamplePolicy())
    good, bad = batch.samples
    assert good.images == [shot] and bad.images == [shot]
    assert good.prompt_ids.count(image_token) == 4 and good.advantage > 0 > bad.advantage
    exp = compose(["trainer.learning_rate=1e-2", "trainer.precision=float32"]).experiment
    trainer = LocalTrainer(model_dir, exp.trainer, exp.algo)

    def logprob(sample: Any) -> float:
        with torch.no_grad():
            values, mask = trainer.logprobs([sample])
        return float((values * mask).sum())

    # step 0: the trainer's logprobs of the sampled tokens, from the image's pixel values, are vLLM's
    with torch.no_grad():
        values, mask = trainer.logprobs([good, bad])
    rollout = torch.tensor([good.rollout_logprobs, bad.rollout_logprobs])
    delta = float(((values - rollout).abs() * mask).max())
    print(f"\n[vlm] step 0: max |trainer - vLLM| logprob over {int(mask.sum())} sampled tokens: {delta:.2e}")
    assert delta < 0.05, f"trainer and vLLM disagree on the screenshot rows: max |delta logprob| {delta}"
    before = logprob(good)
    metrics = trainer.train_step(batch.samples)
    assert metrics["train_tokens"] == good.loss_tokens + bad.loss_tokens
    after = logprob(good)
    print(f"[vlm] rewarded completion's logprob {before:.3f} -> {after:.3f} after one step")
    assert after > before
