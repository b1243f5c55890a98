"""Addon hook checks with mitmproxy's own test helpers (``mitmproxy.test.tflow``/``taddons``).

Runs inside mitmproxy's virtual environment (stdlib ``unittest``): ``<mitm env>/bin/python
tests/proxy/mitm_addon_checks.py``; ``test_addon_tflow.py`` does that under pytest.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mitmproxy import exceptions, http
from mitmproxy import flow as mflow
from mitmproxy.test import taddons, tflow

from forge_cli.proxy.addon import ForgeProxy
from tests.proxy import fake_upstream as fake


def _flow(path: str, body: dict | bytes, key: str | None, ctype: str = "application/json") -> http.HTTPFlow:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"content-type": ctype}
    if key:
        headers["authorization"] = f"Bearer {key}"
    f = tflow.tflow()
    f.request = http.Request.make("POST", f"http://127.0.0.1:9/{path.lstrip('/')}", content, headers)
    return f


class AddonHooks(unittest.IsolatedAsyncioTestCase):
    def _setupAsyncioRunner(self) -> None:
        # IsolatedAsyncioTestCase runs its loop in debug mode; its slow-callback warnings would reach
        # mitmproxy's log handler of an earlier (closed) test loop
        super()._setupAsyncioRunner()  # type: ignore[misc]
        self._asyncioRunner.get_loop().set_debug(False)  # type: ignore[attr-defined]

    async def asyncSetUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        token = Path(self.tmp.name) / "admin"
        token.write_text("admin-secret")
        self.store = str(Path(self.tmp.name) / "t.sqlite")
        self.addon = ForgeProxy()
        self.ctx = taddons.context(self.addon)
        self.tctx = self.ctx.__enter__()
        self.tctx.configure(self.addon, forge_upstreams="http://127.0.0.1:18999,http://127.0.0.1:18998",
                            forge_store=self.store, forge_admin_token_file=str(token), forge_max_output_tokens=100)
        rollout, self.key = self.addon.registry.register("r1", {})
        self.rid = rollout.rollout_id

    async def asyncTearDown(self) -> None:
        self.addon.done()
        self.ctx.__exit__(None, None, None)
        self.tmp.cleanup()

    async def rows(self) -> list[sqlite3.Row]:
        assert self.addon.sink is not None
        if self.addon.sink.sent == 0:  # nothing was handed to the writer
            return []
        self.assertTrue(await self.addon.sink.wait_committed(timeout=20))
        conn = sqlite3.connect(self.store)
        conn.row_factory = sqlite3.Row
        return conn.execute("SELECT * FROM calls ORDER BY id").fetchall()

    async def forward(self, body: dict, path: str = "/v1/chat/completions") -> http.HTTPFlow:
        f = _flow(f"/r/{self.rid}{path}", body, self.key)
        self.addon.requestheaders(f)
        await self.addon.request(f)
        self.assertIsNone(f.response)
        return f

    def stream(self, f: http.HTTPFlow, events: list[bytes]) -> bytes:
        f.response = http.Response.make(200, b"", {"content-type": "text/event-stream"})
        self.addon.responseheaders(f)
        assert callable(f.response.stream)
        out = b""
        for e in events:
            for part in f.response.stream(e):
                out += part
        return out

    async def test_unknown_route_and_wrong_key_are_rejected_unrecorded(self) -> None:
        for path, key, status in (("/v1/chat/completions", self.key, 404), (f"/r/{self.rid}/v1/chat/completions",
                                   "wrong", 401), (f"/r/{self.rid}/v1/chat/completions", None, 401),
                                  ("/r/nope/v1/chat/completions", self.key, 401)):
            f = _flow(path, {"model": "m"}, key)
            self.addon.requestheaders(f)
            await self.addon.request(f)
            self.assertEqual(f.response.status_code, status, path)
            self.assertIn(b'"error"', f.response.content)
        self.assertEqual(await self.rows(), [])
        self.assertEqual(self.addon.metrics.errors["unauthorized"], 3)

    async def test_request_is_rewritten_for_capture_and_routed_upstream(self) -> None:
        f = await self.forward({"model": "m", "messages": [], "max_tokens": 5000})
        sent = json.loads(f.request.content)
        self.assertEqual((sent["return_token_ids"], sent["logprobs"], sent["max_tokens"]), (True, True, 100))
        self.assertEqual((f.request.host, f.request.port, f.request.path), ("127.0.0.1", 18999, "/v1/chat/completions"))
        self.assertNotIn("authorization", f.request.headers)

    async def test_non_streamed_answer_is_stripped_and_recorded(self) -> None:
        f = await self.forward({"model": "m", "messages": []})
        upstream = json.dumps(fake.chat_json({"model": "m", "return_token_ids": True, "logprobs": True})).encode()
        f.response = http.Response.make(200, upstream, {"content-type": "application/json"})
        self.addon.responseheaders(f)
        self.addon.response(f)
        client = json.loads(f.response.content)
        self.assertNotIn("prompt_token_ids", client)
        self.assertIsNone(client["choices"][0]["logprobs"])
        (row,) = await self.rows()
        self.assertEqual(row["status"], "ok")
        self.assertEqual(json.loads(row["completion_token_ids"]), fake.TOKENS)

    async def _streamed(self, end: str, cut: int | None = None) -> sqlite3.Row:
        f = await self.forward({"model": "m", "messages": [], "stream": True})
        events = fake.chat_events({"model": "m", "stream": True, "return_token_ids": True, "logprobs": True})
        out = self.stream(f, events[:cut])
        if end == "response":
            f.response.stream(b"")
            self.addon.response(f)
        else:
            f.error = mflow.Error("Client disconnected.")
            self.addon.error(f)
        self.assertNotIn(b"token_ids", out)
        (row,) = await self.rows()
        return row

    async def test_terminal_event_then_response_hook(self) -> None:
        row = await self._streamed("response")
        self.assertEqual((row["status"], row["completion_tokens"]), ("ok", 4))

    async def test_terminal_event_then_error_hook_still_ok(self) -> None:
        row = await self._streamed("error")  # Codex closes right after the terminal event
        self.assertEqual((row["status"], row["completion_tokens"]), ("ok", 4))

    async def test_disconnect_before_terminal_event_is_client_abort(self) -> None:
        row = await self._streamed("error", cut=3)
        self.assertEqual(row["status"], "client_abort")
        self.assertEqual(json.loads(row["completion_token_ids"]), fake.TOKENS[:2])

    async def test_stream_end_without_terminal_event_is_incomplete(self) -> None:
        row = await self._streamed("response", cut=3)
        self.assertEqual(row["status"], "incomplete")

    async def _responses_streamed(self, end: str) -> tuple[bytes, sqlite3.Row]:
        f = await self.forward({"model": "m", "input": "hi", "stream": True, "store": False}, path="/v1/responses")
        sent = json.loads(f.request.content)
        self.assertEqual(f.request.path, "/v1/chat/completions")
        self.assertEqual((sent["messages"], sent["max_tokens"], sent["logprobs"]), ([{"role": "user", "content": "hi"}],
                                                                                    100, True))
        out = self.stream(f, fake.chat_events({**sent, "model": "m"}))
        if end == "response":
            f.response.stream(b"")
            self.addon.response(f)
        else:
            f.error = mflow.Error("Client disconnected.")
            self.addon.error(f)
        (row,) = await self.rows()
        return out, row

    async def test_responses_stream_translated_then_either_hook(self) -> None:
        for end in ("response", "error"):  # Codex may close right after response.completed
            with self.subTest(end=end):
                out, row = await self._responses_streamed(end)
                self.assertTrue(out.startswith(b"event: response.created\n"), out[:200])
                self.assertIn(b"event: response.completed\n", out)
                self.assertNotIn(b"token_ids", out)
                self.assertEqual((row["status"], row["wire_format"]), ("ok", "responses"))
                self.assertEqual(json.loads(row["completion_token_ids"]), fake.TOKENS)
                self.assertEqual(len(json.loads(row["completion_logprobs"])), len(fake.TOKENS))
                response = json.loads(row["response"])
                self.assertEqual(response["output"][0]["content"][0]["text"], "Hello, world!")
                self.assertIn("messages", json.loads(row["upstream_request"]))
                conn = sqlite3.connect(self.store)
                conn.execute("DELETE FROM calls")
                conn.commit()
                conn.close()

    async def test_responses_non_streamed_and_refused(self) -> None:
        f = await self.forward({"model": "m", "input": [{"role": "user", "content": "hi"}]}, path="/v1/responses")
        upstream = json.dumps(fake.chat_json({**json.loads(f.request.content), "model": "m"})).encode()
        f.response = http.Response.make(200, upstream, {"content-type": "application/json"})
        self.addon.responseheaders(f)
        self.addon.response(f)
        client = json.loads(f.response.content)
        self.assertEqual((client["object"], client["output"][0]["content"][0]["text"]), ("response", "Hello, world!"))
        g = _flow(f"/r/{self.rid}/v1/responses", {"model": "m", "input": "x", "previous_response_id": "resp_1"},
                  self.key)
        self.addon.requestheaders(g)
        await self.addon.request(g)
        self.assertEqual(g.response.status_code, 400)
        self.assertIn(b"previous_response_id", g.response.content)
        (row,) = await self.rows()
        self.assertEqual((row["status"], row["completion_tokens"]), ("ok", 4))

    async def test_gemini_stream_translated_key_in_query_then_either_hook(self) -> None:
        for end in ("response", "error"):
            with self.subTest(end=end):
                f = _flow(f"/r/{self.rid}/v1beta/models/policy:streamGenerateContent?alt=sse&key={self.key}",
                          {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}, None)
                self.addon.requestheaders(f)
                await self.addon.request(f)
                self.assertIsNone(f.response)
                sent = json.loads(f.request.content)
                self.assertEqual(f.request.path, "/v1/chat/completions")  # neither the query nor the key go upstream
                self.assertEqual((sent["model"], sent["messages"], sent["max_tokens"], sent["stream"]),
                                 ("policy", [{"role": "user", "content": "hi"}], 100, True))
                out = self.stream(f, fake.chat_events({**sent, "model": "policy"}))
                if end == "response":
                    f.response.stream(b"")
                    self.addon.response(f)
                else:
                    f.error = mflow.Error("Client disconnected.")
                    self.addon.error(f)
                self.assertTrue(out.startswith(b"data: {\"candidates\""), out[:200])
                self.assertNotIn(b"token_ids", out)
                (row,) = await self.rows()
                self.assertEqual((row["status"], row["wire_format"]), ("ok", "gemini"))
                self.assertEqual(row["path"], "/v1beta/models/policy:streamGenerateContent?alt=sse")  # key not kept
                self.assertNotIn(self.key, json.dumps(dict(row)))
                self.assertEqual(json.loads(row["completion_token_ids"]), fake.TOKENS)
                self.assertEqual(len(json.loads(row["completion_logprobs"])), len(fake.TOKENS))
                answer = json.loads(row["response"])["candidates"][0]
                self.assertEqual((answer["content"]["parts"], answer["finishReason"]),
                                 ([{"text": "Hello, world!"}], "STOP"))
                conn = sqlite3.connect(self.store)
                conn.execute("DELETE FROM calls")
                conn.commit()
                conn.close()

    async def test_gemini_errors_in_googles_shape(self) -> None:
        for path, key, status in ((f"/r/{self.rid}/v1beta/models/policy:countTokens", self.key, 404),
                                  (f"/r/{self.rid}/v1beta/models/policy:generateContent?key=wrong", None, 401),
                                  (f"/r/{self.rid}/v1beta/models/policy:streamGenerateContent", self.key, 400)):
            f = _flow(path, {"contents": []}, key)
            self.addon.requestheaders(f)
            await self.addon.request(f)
            self.assertEqual(f.response.status_code, status, path)
            self.assertEqual(json.loads(f.response.content)["error"]["code"], status)
            self.assertIn("status", json.loads(f.response.content)["error"])
        f = await self.forward({"contents": [{"parts": [{"text": "hi"}]}]},
                               path="/v1beta/models/policy:generateContent")
        f.response = http.Response.make(400, b'{"object":"error","message":"too long","code":400}',
                                        {"content-type": "application/json"})
        self.addon.responseheaders(f)
        self.addon.response(f)
        self.assertEqual(json.loads(f.response.content), {"error": {
            "code": 400, "message": "upstream_error: too long", "status": "INVALID_ARGUMENT"}})
        (row,) = await self.rows()
        self.assertEqual((row["status"], row["wire_format"]), ("upstream_error", "gemini"))

    async def test_upstream_connect_failure_is_upstream_error_and_fails_over(self) -> None:
        f = await self.forward({"model": "m", "messages": []})
        f.error = mflow.Error("Connection refused")
        self.addon.error(f)
        (row,) = await self.rows()
        self.assertEqual(row["status"], "upstream_error")
        g = await self.forward({"model": "m", "messages": []})
        self.assertEqual(g.request.port, 18998)  # sticky upstream marked unhealthy: next call moves

    async def test_bad_content_type_and_invalid_json(self) -> None:
        for body, ctype, status in ((b'{"logprobs": true, x}', "application/json", 400), (b"{}", "text/plain", 415)):
            f = _flow(f"/r/{self.rid}/v1/chat/completions", body, self.key, ctype)
            self.addon.requestheaders(f)
            await self.addon.request(f)
            self.assertEqual(f.response.status_code, status)
        self.assertEqual(await self.rows(), [])

    async def test_control_api_answers_in_the_async_hook_and_pause_holds_calls(self) -> None:
        def control(method: str, route: str, body: bytes = b"") -> http.HTTPFlow:
            f = tflow.tflow()
            f.request = http.Request.make(method, f"http://127.0.0.1:9/forge/v1/{route}", body,
                                          {"authorization": "Bearer admin-secret"})
            self.addon.requestheaders(f)
            return f

        health = control("GET", "health")
        await self.addon.request(health)
        self.assertEqual(json.loads(health.response.content)["paused"], False)
        pause = control("POST", "pause")
        await self.addon.request(pause)
        self.assertEqual(json.loads(pause.response.content), {"paused": True})
        f = _flow(f"/r/{self.rid}/v1/chat/completions", {"model": "m", "messages": []}, self.key)
        self.addon.requestheaders(f)
        held = asyncio.ensure_future(self.addon.request(f))
        await asyncio.sleep(0.2)
        self.assertFalse(held.done())  # waits while paused, not sent upstream
        self.assertEqual(f.request.port, 9)
        resume = control("POST", "resume")
        await self.addon.request(resume)
        await asyncio.wait_for(held, 5)
        self.assertEqual((f.request.port, f.response), (18999, None))  # sent on after the resume

    async def test_mitmproxys_own_error_page_goes_out_in_the_calls_shape(self) -> None:
        # mitmproxy's own function builds the page (tests may use its private names; forge_cli/proxy may not)
        from mitmproxy.proxy.layers.http._http1 import make_error_response

        from forge_cli.proxy import transport

        page = make_error_response(502, "Connection refused <&>")
        self.assertEqual(transport.mitmproxy_error_page(page), (502, "Connection refused <&>"))
        self.assertIsNone(transport.mitmproxy_error_page(b"HTTP/1.1 502 Bad Gateway\r\ncontent-type: text/html"
                                                         b"\r\n\r\n<p>upstream</p>"))  # an upstream's page: its own

        class Sink:
            data = b""

            def write(self, data: bytes) -> None:
                self.data += data

        for fmt, explained, check in (
                ("anthropic", None, lambda e: e["type"] == "error" and "Connection refused" in e["error"]["message"]),
                ("gemini", "upstream timed out after 3s", lambda e: e["error"]["code"] == 502
                 and e["error"]["message"].endswith("forge proxy: upstream timed out after 3s")),
                (None, None, lambda e: e["error"]["message"].startswith("forge proxy: Connection refused"))):
            reader = transport.ClientReader(None, None)
            reader.fmt, reader.explained = fmt, explained
            sink = Sink()
            transport.ClientWriter(sink, reader).write(page)
            head, _, body = sink.data.partition(b"\r\n\r\n")
            self.assertTrue(head.startswith(b"HTTP/1.1 502 Bad Gateway\r\ncontent-type: application/json"), head)
            self.assertIn(f"content-length: {len(body)}".encode(), head)
            self.assertTrue(check(json.loads(body)), body)
            self.assertIsNone(reader.explained)  # used once
        ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"
        sink = Sink()
        transport.ClientWriter(sink, transport.ClientReader(None, None)).write(ok)
        self.assertEqual(sink.data, ok)

    async def test_options_are_validated(self) -> None:
        with self.assertRaises(exceptions.OptionsError):
            self.tctx.configure(self.addon, forge_max_header_kb=0)
        with self.assertRaises(exceptions.OptionsError):
            self.tctx.configure(self.addon, forge_upstreams="")


if __name__ == "__main__":
    asyncio.set_event_loop_policy(asyncio.DefaultEventLoopPolicy())
    unittest.main(verbosity=2)
