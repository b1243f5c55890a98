"""The conformance kit of a wire format (``forge_cli/proxy/wire/base.py``'s ``WireFormat``): every format does the
same things the same way, through the registry alone.

    problems = check_wire_format("mine", request)   # request(stream) -> (client path, body), see below
    assert not problems, problems

``request(stream)`` builds a call in the format's own terms with one user turn ("hi"), one tool ``get_weather``
(:data:`TOOL`: a ``city`` string parameter) and an output limit of 64 tokens. The checks: the path routes to the
format; the request becomes a capturing Chat Completions request (token ids, logprobs, the limit, the tool, the
stream flag); a JSON answer and a streamed one (text, and a tool call with ``Paris`` as its city) reach the client
without the capture fields and the record keeps every token id with one logprob each, the finish reason and the
usage; a cut-off stream is incomplete and ends in an error event; errors come in the format's shape; a broken body
is refused; the store writer's row has every column; a recorded answer replays (prefix replay answers a recorded
call from upstream, in Chat Completions): for the JSON answers (text, a tool call, each also with reasoning) and the
streamed ones as the record assembles them, ``upstream_answer`` gives a Chat Completions answer without capture
fields or usage which, with the original's put back, ``client_body`` turns into the recorded answer exactly, and it
raises ``ValueError`` for an error body. Each check is also runnable alone (:func:`run_check`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from forge_cli.proxy import assemble
from forge_cli.proxy.wire import FORMATS, route, sse
from forge_cli.proxy.wire.base import BadRequest, Limits, Prepared, WireFormat
from forge_cli.traces import store

Request = Callable[[bool], tuple[str, dict[str, Any]]]
PROMPT = [1, 2, 3]
TOKENS = [10, 11, 12, 13, 14]
TOOL = {"name": "get_weather", "description": "weather", "parameters": {"type": "object",
                                                                         "properties": {"city": {"type": "string"}}}}


class Problem(AssertionError):
    """What a check found wrong."""


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise Problem(message)


def _entries(tokens: list[int]) -> list[dict[str, Any]]:
    return [{"token": f"t{t}", "logprob": -0.5, "bytes": [], "top_logprobs": []} for t in tokens]


def completion(tool: bool, reasoning: bool = False) -> dict[str, Any]:
    """The upstream's (vLLM's) JSON answer: text, or one get_weather call, with token ids and logprobs (and with
    ``reasoning``, the model's reasoning before it)."""
    message: dict[str, Any] = {"role": "assistant", "content": None if tool else "Hello there"}
    if reasoning:
        message["reasoning_content"] = "The user greets me."
    if tool:
        message["tool_calls"] = [{"id": "call_1", "type": "function",
                                  "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]
    return {"id": "chatcmpl-x", "object": "chat.completion", "created": 1, "model": "m", "prompt_token_ids": PROMPT,
            "choices": [{"index": 0, "message": message, "token_ids": TOKENS,
                         "logprobs": {"content": _entries(TOKENS)}, "finish_reason": "tool_calls" if tool else "stop"}],
            "usage": {"prompt_tokens": len(PROMPT), "completion_tokens": len(TOKENS)}}


def stream(tool: bool, done: bool = True) -> bytes:
    """The upstream's SSE answer: text in pieces (or a tool call's arguments in pieces), one token a chunk."""
    head = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    chunks: list[dict[str, Any]] = [{**head, "prompt_token_ids": PROMPT, "choices": [
        {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}]
    for i, token in enumerate(TOKENS):
        if tool:
            call: dict[str, Any] = {"index": 0, "function": {"arguments": '{"city"' if i == 1 else ""}}
            if i == 0:
                call.update(id="call_1", type="function", function={"name": "get_weather", "arguments": ""})
            elif i >= 2:
                call["function"]["arguments"] = (': "Par', 'is"', "}")[i - 2]
            delta: dict[str, Any] = {"tool_calls": [call]}
        else:
            delta = {"content": ("Hel", "lo", " the", "re", "")[i]}
        last = i == len(TOKENS) - 1
        chunks.append({**head, "choices": [{"index": 0, "delta": delta, "token_ids": [token],
                                            "logprobs": {"content": _entries([token])},
                                            "finish_reason": ("tool_calls" if tool else "stop") if last else None}]})
    chunks.append({**head, "choices": [], "usage": {"prompt_tokens": len(PROMPT), "completion_tokens": len(TOKENS)}})
    raw = b"".join(sse.encode(c) for c in chunks)
    return raw + b"data: [DONE]\n\n" if done else raw


def _prepare(fmt: WireFormat, request: Request, streamed: bool) -> Prepared:
    path, body = request(streamed)
    found = route(path)
    _expect(found is fmt, f"{path} is routed to {found.name if found else 'no format'}, not {fmt.name}")
    return fmt.prepare(json.dumps(body).encode(), Limits(max_output_tokens=4096), path)


def _record(fmt: WireFormat, raw: bytes, streamed: bool, prep: Prepared, tool: bool) -> None:
    record = fmt.assemble(raw, streamed, prep)
    _expect(record.complete and record.prompt_token_ids == PROMPT and record.completion_token_ids == TOKENS,
            f"the record keeps the prompt's and the answer's token ids: got {record.prompt_token_ids} and "
            f"{record.completion_token_ids}")
    _expect(record.completion_logprobs is not None and len(record.completion_logprobs) == len(TOKENS),
            "the record keeps one logprob per answer token")
    _expect(record.finish_reason == ("tool_calls" if tool else "stop"), f"finish reason: {record.finish_reason}")


def request_becomes_a_capturing_chat_request(fmt: WireFormat, request: Request) -> None:
    for streamed in (False, True):
        upstream = json.loads(_prepare(fmt, request, streamed).body)
        _expect(upstream.get("return_token_ids") is True and upstream.get("logprobs") is True,
                "the upstream request asks for token ids and logprobs")
        _expect(upstream.get("max_tokens") == 64,
                f"the output limit becomes max_tokens 64: {upstream.get('max_tokens')}")
        _expect([t["function"]["name"] for t in upstream.get("tools", [])] == ["get_weather"],
                "the tool reaches the upstream as a Chat Completions function")
        _expect(bool(upstream.get("stream")) == streamed, f"stream={streamed} is kept")
    _expect(fmt.upstream_path == "/v1/chat/completions", "served from the upstream's Chat Completions endpoint")


def json_answer_reaches_the_client_and_the_record(fmt: WireFormat, request: Request) -> None:
    for tool in (False, True):
        prep = _prepare(fmt, request, False)
        raw = json.dumps(completion(tool)).encode()
        text = json.dumps(json.loads(fmt.client_body(raw, prep)))
        _expect(("get_weather" in text and "Paris" in text) if tool else "Hello there" in text,
                f"the client's answer holds the {'tool call' if tool else 'text'}")
        _expect("token_ids" not in text, "capture fields the client did not ask for reach it")
        _record(fmt, raw, False, prep, tool)


def stream_reaches_the_client_and_the_record(fmt: WireFormat, request: Request) -> None:
    for tool in (False, True):
        prep = _prepare(fmt, request, True)
        raw = stream(tool)
        client = fmt.client_stream(prep)
        out = b"".join(client.feed(raw[i:i + 9]) for i in range(0, len(raw), 9)) + client.feed(b"")
        _expect(client.done, "the client's stream reached its terminal event")
        events = [sse.event_json(e)[1] for e in sse.iter_events(out)]
        text = json.dumps([e for e in events if e is not None])
        # tool-call arguments may reach the client in pieces
        pieces = ("get_weather", "city", "Par", "is") if tool else ("Hel", "lo", " the", "re")
        _expect(all(piece in text for piece in pieces), f"the client's stream holds the {'call' if tool else 'text'}")
        _expect("token_ids" not in text, "capture fields the client did not ask for reach it")
        _record(fmt, raw, True, prep, tool)
        record = fmt.assemble(raw, True, prep)
        _expect(record.extra.get("usage") == {"prompt_tokens": len(PROMPT), "completion_tokens": len(TOKENS)},
                f"the record keeps the usage: {record.extra.get('usage')}")


def cut_off_stream_is_incomplete(fmt: WireFormat, request: Request) -> None:
    prep = _prepare(fmt, request, True)
    raw = stream(False, done=False)
    client = fmt.client_stream(prep)
    client.feed(raw)
    client.feed(b"")
    _expect(not client.done, "a stream without its terminal event is not done")
    failed = client.fail("forge proxy: upstream stream ended before its terminal event")
    _expect(b"upstream stream ended" in failed and failed.endswith(b"\n\n"), "it ends in an error event")
    record = fmt.assemble(raw, True, prep)
    _expect(not record.complete and record.completion_token_ids == TOKENS, "its record is incomplete, tokens kept")


def errors_in_the_format_shape(fmt: WireFormat, request: Request) -> None:
    body = json.loads(fmt.error(429, "slow down", "rate_limit"))
    _expect("slow down" in json.dumps(body) and isinstance(body.get("error"), dict),
            f"an error body in the format's shape holds the message: {body}")
    upstream_error = b'{"error": {"message": "too long", "type": "BadRequestError", "code": 400}}'
    _expect(fmt.client_body(upstream_error, _prepare(fmt, request, False)) == upstream_error,
            "an upstream error passes client_body unchanged (the addon reshapes it)")
    path, _ = request(False)
    try:
        fmt.prepare(b"[1, 2]", Limits(), path)
    except BadRequest:
        return
    raise Problem("a body that is not a request object was not refused (BadRequest)")


def writer_row_has_every_column(fmt: WireFormat, request: Request) -> None:
    prep = _prepare(fmt, request, True)
    path, body = request(True)
    meta = {"type": "call", "rollout_id": "r", "seq": 0, "wire_format": fmt.name, "path": path, "stream": True,
            "wants_token_ids": prep.wants_token_ids, "wants_logprobs": prep.wants_logprobs}
    row = dict(zip(store.CALL_FIELDS, assemble.build_row(meta, {"request": json.dumps(body).encode(),
                                                                "response": stream(True)}), strict=True))
    _expect((row["wire_format"], row["status"], row["finish_reason"]) == (fmt.name, "ok", "tool_calls"),
            f"the row's format, status and finish reason: {row['wire_format']}, {row['status']}, "
            f"{row['finish_reason']}")
    _expect(json.loads(row["prompt_token_ids"]) == PROMPT and json.loads(row["completion_token_ids"]) == TOKENS,
            "the row keeps the token ids")
    _expect((row["prompt_tokens"], row["completion_tokens"]) == (len(PROMPT), len(TOKENS)), "the row's counts")
    _expect(len(json.loads(row["completion_logprobs"])) == len(TOKENS) and row["response_bytes"] > 0,
            "the row keeps one logprob per token and the response's size")


_CAPTURE = ("prompt_token_ids", "prompt_text", "usage")  # top-level fields upstream_answer leaves out


def recorded_answer_inverts_to_the_upstream_answer(fmt: WireFormat, request: Request) -> None:
    invert = fmt.upstream_answer
    if invert is None:
        raise Problem("upstream_answer is None: prefix replay needs it (the Chat Completions answer a recorded client "
                      "answer was translated from) to answer a recorded call in this format")
    answers: list[tuple[str, dict[str, Any], Any, Prepared]] = []
    for tool in (False, True):
        kind = "tool call" if tool else "text"
        for reasoning in (False, True):
            prep = _prepare(fmt, request, False)
            original = completion(tool, reasoning)
            answer = json.loads(fmt.client_body(json.dumps(original).encode(), prep))
            answers.append((f"JSON {kind} answer" + (" with reasoning" if reasoning else ""), original, answer, prep))
        prep = _prepare(fmt, request, True)
        answers.append((f"streamed {kind} answer", completion(tool), fmt.assemble(stream(tool), True, prep).response,
                        prep))
    for what, original, answer, prep in answers:
        upstream = invert(json.loads(json.dumps(answer)))
        choices = upstream.get("choices") if isinstance(upstream, dict) else None
        _expect(isinstance(choices, list) and len(choices) == 1 and isinstance(choices[0], dict)
                and upstream.get("object") == "chat.completion",
                f"upstream_answer of the {what} is a chat.completion with one choice: {upstream}")
        assert isinstance(choices, list)
        found = [k for k in _CAPTURE if k in upstream] + [k for k in ("token_ids", "logprobs") if k in choices[0]]
        _expect(not found, f"upstream_answer of the {what} leaves out capture fields and usage: it has {found}")
        kept = original["choices"][0]
        choices[0].update(token_ids=kept["token_ids"], logprobs=kept["logprobs"])
        upstream.update(prompt_token_ids=original["prompt_token_ids"], usage=original["usage"])
        again = json.loads(fmt.client_body(json.dumps(upstream).encode(), prep))
        _expect(again == answer, f"the {what} translated back from upstream_answer's is not the recorded one: "
                f"{json.dumps(again)[:400]} != {json.dumps(answer)[:400]}")
    try:
        invert(json.loads(fmt.error(400, "bad", "invalid_request_error")))
    except ValueError:
        return
    raise Problem("upstream_answer of an error body raised no ValueError (it is no answer)")


CHECKS: dict[str, Callable[[WireFormat, Request], None]] = {check.__name__: check for check in (
    request_becomes_a_capturing_chat_request, json_answer_reaches_the_client_and_the_record,
    stream_reaches_the_client_and_the_record, cut_off_stream_is_incomplete, errors_in_the_format_shape,
    writer_row_has_every_column, recorded_answer_inverts_to_the_upstream_answer)}


def run_check(check: str, name: str, request: Request) -> str | None:
    """One check on the registered format ``name``: None when it passes, else what it found."""
    if name not in FORMATS:
        return f"{check}: no wire format {name!r} is registered (registered: {', '.join(FORMATS)})"
    try:
        CHECKS[check](FORMATS[name], request)
    except Problem as problem:
        return f"{check}: {problem}"
    except Exception as exc:
        return f"{check}: raised {type(exc).__name__}: {exc}"
    return None


def check_wire_format(name: str, request: Request) -> list[str]:
    """Every check on the registered format ``name``; the problems found, empty when it conforms."""
    found = [run_check(check, name, request) for check in CHECKS]
    return [problem for problem in found if problem is not None]
