"""OpenAI Chat Completions: token capture injected into requests, stripped from answers, streams assembled."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from forge_cli.proxy.wire import sse
from forge_cli.proxy.wire.base import (
    Assembled,
    BadRequest,
    Limits,
    Prepared,
    WireFormat,
    clamp,
    dumps,
    load_object,
    logprob,
    openai_error,
    register_wire_format,
)
from forge_cli.proxy.wire.decode import ChatStreamDecoder

# the top-level keys prepare() decides on, found in one scan of the bytes. An unescaped '"key":' can only be an
# object key (inside JSON strings quotes are escaped), so one occurrence is the top-level key or a nested one with
# no top-level key beside it -- either way the decision below is right; two occurrences mean: parse.
_KEYS = re.compile(rb'"(logprobs|top_logprobs|return_token_ids|max_tokens|max_completion_tokens|n)"\s*:\s*')
_INT = re.compile(rb"(-?\d+)\s*[,}]")
# keys whose presence means the request needs a real parse (the client asked for capture itself)
_CAPTURE_KEYS = frozenset({b"logprobs", b"top_logprobs", b"return_token_ids"})
_CAPTURE = b'"return_token_ids":true,"logprobs":true'


def _scan_numbers(text: bytes) -> dict[str, int] | None:
    """The numeric keys that matter, read from the bytes; ``None`` when the body must be parsed instead."""
    found: dict[str, int] = {}
    for match in _KEYS.finditer(text):
        key = match.group(1)
        if key in _CAPTURE_KEYS or key.decode() in found:
            return None
        number = _INT.match(text, match.end())
        if number is None:
            return None
        found[key.decode()] = int(number.group(1))
    return found


def prepare(body: bytes, limits: Limits, path: str = "") -> Prepared:
    """Ask the upstream for prompt/completion token ids and logprobs; clamp output limits.

    The client's bytes are never re-serialised (50 KB bodies are common). Unless the client asked for
    capture fields itself, the body is not even parsed: output limits are read from the bytes, the
    capture fields spliced in (the upstream validates the JSON as it would have anyway). Otherwise the
    body is parsed (validated, facts read) and the overriding fields are appended before the closing
    brace. Duplicate keys resolve to the last one in
    the upstream's JSON parsing (Python's ``json``, as vLLM uses), so appended values win.
    """
    text = body.strip()
    numbers = None
    if limits.capture and not limits.model and not limits.sampling and text[:1] == b"{" and text[-1:] == b"}":
        numbers = _scan_numbers(text)
    if numbers is not None and numbers.get("n", 1) == 1:
        clamped = {k: clamp(v, limits.max_output_tokens) for k, v in numbers.items() if k != "n"}
        clamped = {k: v for k, v in clamped.items() if v != numbers[k]}
        if not _has_limit(numbers) and limits.max_output_tokens > 0:
            clamped["max_tokens"] = limits.max_output_tokens
        inner = text[1:].lstrip()
        if not clamped:
            glue = b"" if inner[:1] == b"}" else b","
            return Prepared(body=b"{" + _CAPTURE + glue + inner, changed=True)
        head = text[:-1].rstrip()
        glue = b"" if head.endswith(b"{") else b","
        return Prepared(body=head + glue + _CAPTURE + b"," + dumps(clamped)[1:], changed=True, rewritten=True)
    obj = load_object(body)
    _check_n(obj)
    overrides: dict[str, Any] = {"return_token_ids": True, "logprobs": True} if limits.capture else {}
    for key in ("max_tokens", "max_completion_tokens"):
        if key in obj and clamp(obj[key], limits.max_output_tokens) != obj[key]:
            overrides[key] = clamp(obj[key], limits.max_output_tokens)
    if not _has_limit(obj) and limits.max_output_tokens > 0:
        overrides["max_tokens"] = limits.max_output_tokens
    if limits.model and obj.get("model") != limits.model:
        overrides["model"] = limits.model
    overrides.update(limits.sampling)
    head = text[:-1].rstrip()
    glue = b"" if head.endswith(b"{") else b","
    if not overrides:
        return Prepared(body=body, changed=False, wants_token_ids=bool(obj.get("return_token_ids")),
                        wants_logprobs=bool(obj.get("logprobs")), stream=bool(obj.get("stream")),
                        model=obj.get("model"))
    return Prepared(body=head + glue + dumps(overrides)[1:], changed=True, rewritten=len(overrides) > 2,
                    wants_token_ids=bool(obj.get("return_token_ids")), wants_logprobs=bool(obj.get("logprobs")),
                    stream=bool(obj.get("stream")), model=overrides.get("model", obj.get("model")))


def _has_limit(obj: dict[str, Any]) -> bool:
    """Does the request set an output limit? Without one vLLM generates to the end of the context (Codex, Gemini CLI
    and mini-swe-agent send none: minutes of CPU per call), so the proxy's cap is added."""
    return obj.get("max_tokens") is not None or obj.get("max_completion_tokens") is not None


def _check_n(obj: dict[str, Any]) -> None:
    if obj.get("n", 1) not in (1, None):
        raise BadRequest("only n=1 is supported: each call is one sample")


def prepare_object(obj: dict[str, Any], limits: Limits) -> Prepared:
    """The parsed form of ``prepare`` (also used by the Anthropic translation)."""
    _check_n(obj)
    wants_logprobs = bool(obj.get("logprobs"))
    wants_ids = bool(obj.get("return_token_ids"))
    if limits.capture:
        obj["return_token_ids"] = True
        obj["logprobs"] = True
    for key in ("max_tokens", "max_completion_tokens"):
        if key in obj:
            obj[key] = clamp(obj[key], limits.max_output_tokens)
    if not _has_limit(obj) and limits.max_output_tokens > 0:
        obj["max_tokens"] = limits.max_output_tokens
    if limits.model:
        obj["model"] = limits.model
    obj.update(limits.sampling)
    stream = bool(obj.get("stream"))
    return Prepared(body=dumps(obj), changed=True, rewritten=True, wants_token_ids=wants_ids,
                    wants_logprobs=wants_logprobs, stream=stream, model=obj.get("model"))


def strip_capture(obj: dict[str, Any], prep: Prepared) -> None:
    """Remove what the client did not ask for from a response or chunk object, in place."""
    if not prep.wants_token_ids:
        obj.pop("prompt_token_ids", None)
        obj.pop("prompt_text", None)
    for choice in obj.get("choices") or ():
        if not prep.wants_token_ids:
            choice.pop("token_ids", None)
        if not prep.wants_logprobs:
            choice["logprobs"] = None


# the prompt's token ids: one per prompt token, most of a vLLM answer's bytes (12.5k ids for a 50 KB prompt)
_PROMPT_IDS = re.compile(rb'"prompt_token_ids"[ \t\n\r]*:[ \t\n\r]*\[')
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_JSON_SPACE = b" \t\n\r"


def _without_prompt_ids(raw: bytes) -> bytes | None:
    """``raw`` with its top-level ``prompt_token_ids`` list cut out as bytes, or None when that cannot be done
    exactly (the key absent, twice, not at the top level, or its value not a list of integers): parsing the rest,
    ~15% of a vLLM answer, is then all ``client_body`` pays for. An unescaped ``"prompt_token_ids"`` is always a
    key (quotes in JSON strings are escaped); it is a top-level one when, with strings blanked out, exactly one brace
    and no bracket is open before it."""
    if raw.count(b'"prompt_token_ids"') != 1:
        return None
    match = _PROMPT_IDS.search(raw)
    if match is None:
        return None
    end = raw.find(b"]", match.end())
    if end < 0 or raw[match.end():end].translate(None, b"0123456789,-" + _JSON_SPACE):
        return None
    before = _STRING.sub(b'""', raw[:match.start()])
    if before.count(b"{") - before.count(b"}") != 1 or before.count(b"[") != before.count(b"]"):
        return None
    head, tail = raw[:match.start()].rstrip(_JSON_SPACE), raw[end + 1:].lstrip(_JSON_SPACE)
    if tail[:1] == b",":
        return head + tail[1:]
    return head[:-1] + tail if head[-1:] == b"," else head + tail


def client_body(upstream: bytes, prep: Prepared) -> bytes:
    """A non-streamed upstream answer as the client should see it: the capture fields it did not ask for removed
    (for a valid JSON answer, the same bytes as parsing it whole, popping them and writing it compactly; the prompt's
    ids are cut out before the parse, which is most of its cost)."""
    if prep.wants_token_ids and prep.wants_logprobs:
        return upstream
    cut = None if prep.wants_token_ids else _without_prompt_ids(upstream)
    try:
        obj = json.loads(upstream if cut is None else cut)
    except ValueError:
        return upstream
    if not isinstance(obj, dict) or "choices" not in obj:
        return upstream
    strip_capture(obj, prep)
    return dumps(obj)


class ClientStream:
    """Per-call SSE transformer: passes events through as they complete, stripping capture fields."""

    __slots__ = ("_prep", "_split", "_strip", "done")

    def __init__(self, prep: Prepared) -> None:
        self._prep = prep
        self._split = sse.SSESplitter()
        self._strip = not (prep.wants_token_ids and prep.wants_logprobs)
        self.done = False

    def feed(self, chunk: bytes) -> bytes:
        """Transformed bytes for the client; ``b""`` ends the stream."""
        events = self._split.feed(chunk) if chunk else self._split.flush()
        return b"".join([self._event(e) for e in events])

    def fail(self, message: str) -> bytes:
        """The event that ends the stream in error (the upstream's stream broke off)."""
        return b"data: " + openai_error(502, message, "upstream_error") + b"\n\n"

    def _event(self, raw: bytes) -> bytes:
        if raw.startswith(b"data: [DONE]"):
            self.done = True
            return raw + b"\n\n"
        if raw.startswith(b"data:"):  # a cheap look, not a parse: garbage or a cut-off chunk is not passed on
            data = raw[5:].strip()
            if data[:1] != b"{" or data[-1:] != b"}":
                raise ValueError(f"not a JSON chunk: {raw[:80]!r}")
        if self._strip and (b"token_ids" in raw or b'"logprobs":{' in raw):
            name, obj = sse.event_json(raw)
            if isinstance(obj, dict):
                strip_capture(obj, self._prep)
                return sse.encode(obj, name)
        return raw + b"\n\n"


def _logprob_values(logprobs: Any) -> list[float]:
    content = (logprobs or {}).get("content") if isinstance(logprobs, dict) else None
    return [logprob(e) for e in content or ()]


def assemble(upstream: bytes, streamed: bool, prep: Prepared) -> Assembled:
    """The complete response (client's view) and the captured tokens from upstream bytes."""
    if not streamed:
        obj = json.loads(upstream)
        choice = (obj.get("choices") or [{}])[0]
        result = Assembled(
            response=obj,
            prompt_token_ids=obj.get("prompt_token_ids"),
            completion_token_ids=choice.get("token_ids"),
            completion_logprobs=_logprob_values(choice.get("logprobs")),
            finish_reason=choice.get("finish_reason"),
        )
        result.extra["usage"] = obj.get("usage")
        strip_capture(obj, prep)  # the extracted lists above stay referenced
        return result
    return assemble_stream(sse.iter_events(upstream), prep)


def assemble_stream(events: list[bytes], prep: Prepared) -> Assembled:
    """Chat chunks folded into one ``chat.completion`` object."""
    decoder = ChatStreamDecoder()
    for chunk in decoder.events(events):
        if chunk is not None:
            decoder.absorb(chunk)
    result = Assembled(
        response=decoder.completion(prep.wants_token_ids, prep.wants_logprobs),
        prompt_token_ids=decoder.prompt_token_ids,
        completion_token_ids=decoder.token_ids,
        completion_logprobs=[logprob(e) for e in decoder.logprobs],
        finish_reason=decoder.finish_reason,
        complete=decoder.terminal,
    )
    result.extra["usage"] = decoder.usage
    return result


def upstream_answer(response: Any) -> dict[str, Any]:
    """The recorded answer (already a chat completion) as the upstream's, without capture fields or usage."""
    choices = response.get("choices") if isinstance(response, dict) else None
    if not (isinstance(choices, list) and choices and all(isinstance(c, dict) for c in choices)
            and isinstance(choices[0].get("message"), dict)):
        raise ValueError("not a chat completion: no choice with a message")
    out = {k: v for k, v in copy.deepcopy(response).items() if k not in ("prompt_token_ids", "prompt_text", "usage")}
    out["choices"] = [{k: v for k, v in c.items() if k not in ("token_ids", "logprobs")} for c in out["choices"]]
    return out


FORMAT = register_wire_format(WireFormat(
    name="chat", paths=("/v1/chat/completions", "/chat/completions"), prepare=prepare, client_body=client_body,
    client_stream=ClientStream, assemble=assemble, error=openai_error, reshapes_errors=False,
    upstream_answer=upstream_answer))
