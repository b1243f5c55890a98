"""Gemini API (``generateContent``, ``streamGenerateContent?alt=sse``), served by translation to Chat Completions.

Gemini CLI and Google's SDKs speak only this API. As with Anthropic Messages and the Responses API, the proxy
rewrites each call into a Chat Completions request (token ids and a logprob for every sampled token) and
translates the answer back: JSON to a ``GenerateContentResponse``, SSE chunks to ``data:`` lines each holding
one ``GenerateContentResponse`` chunk (text as it is generated; function calls, whose arguments arrive in
pieces, whole in the final chunk with the finish reason and usage). The model name is in the path
(``/v1beta/models/<model>:<method>``). ``cachedContent`` is refused: nothing is stored upstream.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any
from urllib.parse import unquote

from forge_cli.proxy.wire import chat, sse
from forge_cli.proxy.wire.base import (
    Assembled,
    BadRequest,
    Limits,
    Prepared,
    WireFormat,
    chat_answer,
    chat_call,
    gemini_error,
    load_object,
    logprob,
    register_wire_format,
    translate_answer,
    unwrap_arguments,
)
from forge_cli.proxy.wire.decode import TranslatedStream

# Gemini API model calls: the model and the method are in the path (/v1beta/models/<model>:<method>)
GEMINI_PATH = re.compile(r"^/(?:v1beta|v1|v1alpha)/models/([^/:]+):(generateContent|streamGenerateContent)$")
_FINISH = {"stop": "STOP", "tool_calls": "STOP", "length": "MAX_TOKENS", "content_filter": "SAFETY",
           "abort": "OTHER"}
_STOP = {"MAX_TOKENS": "length", "SAFETY": "content_filter", "OTHER": "abort"}  # _FINISH inverted (STOP: stop)
_MODES = {"AUTO": "auto", "NONE": "none", "ANY": "required", "VALIDATED": "auto"}
# JSON-Schema keywords whose value is one schema / a list of schemas / a map of schemas (Gemini's Schema dialect)
_ONE = ("items", "additionalProperties", "not")
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")


# -- request: Gemini -> Chat Completions ---------------------------------------------------------------
def target(path: str) -> tuple[str, bool]:
    """(model, streamed) of a model call path (after the ``/r/<id>`` prefix, query kept); ``BadRequest`` else."""
    route, _, query = path.partition("?")
    match = GEMINI_PATH.match(route.rstrip("/"))
    if match is None:
        raise BadRequest(f"not a Gemini model call: {route!r}", 404)
    model, method = unquote(match.group(1)), match.group(2)
    stream = method == "streamGenerateContent"
    if stream and "alt=sse" not in query.split("&"):
        raise BadRequest("streamGenerateContent is served as server-sent events only: add ?alt=sse "
                         "(Google's SDKs and Gemini CLI do)")
    return model, stream


def schema(value: Any) -> Any:
    """Gemini's Schema dialect as JSON Schema: upper-case types (``OBJECT``) lower-cased, ``nullable`` as a
    ``null`` type, ``propertyOrdering`` dropped; structural, so a property named ``type`` is left alone."""
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key == "type" and isinstance(item, str):
            if item.upper() != "TYPE_UNSPECIFIED":
                out["type"] = item.lower()
        elif key == "properties" and isinstance(item, dict):
            out[key] = {name: schema(sub) for name, sub in item.items()}
        elif key in _ONE:
            out[key] = schema(item)
        elif key in _MANY and isinstance(item, list):
            out[key] = [schema(sub) for sub in item]
        elif key not in ("nullable", "propertyOrdering"):
            out[key] = item
    if value.get("nullable") is True and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


def _text(content: Any) -> str:
    """Text of a ``systemInstruction`` (a Content, a list of parts or a string); thought parts skipped."""
    if isinstance(content, str):
        return content
    parts = content.get("parts") if isinstance(content, dict) else content
    return "\n\n".join(str(p["text"]) for p in parts or () if isinstance(p, dict) and isinstance(p.get("text"), str)
                       and not p.get("thought"))


def _tool_output(response: Any) -> str:
    """A ``functionResponse.response`` as the tool message's text: Gemini CLI's ``{"output": "..."}`` unwrapped."""
    if isinstance(response, dict) and len(response) == 1:
        (key, value), = response.items()
        if isinstance(value, str) and key in ("output", "result", "content"):
            return value
        if isinstance(value, str) and key == "error":
            return f"[error] {value}"
    return json.dumps(response, ensure_ascii=False)


class _History:
    """Gemini ``contents`` to chat messages; function responses are paired with the calls they answer."""

    __slots__ = ("messages", "pending", "turn")

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.pending: list[tuple[str, str]] = []  # (id, name) of calls not answered yet
        self.turn = 0

    def model(self, parts: list[Any]) -> None:
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for part in parts:
            if not isinstance(part, dict) or part.get("thought"):
                continue  # thoughts are not part of what the policy model is trained on
            if isinstance(part.get("text"), str):
                texts.append(part["text"])
            call = part.get("functionCall")
            if isinstance(call, dict):
                call_id = str(call.get("id") or f"call_{self.turn}_{len(calls)}")
                name = str(call.get("name") or "")
                # unparsable arguments the answer carried as {"_raw": text} go back upstream as that text, as the
                # policy wrote them (anthropic does the same): the prompt then extends the previous call's ids
                calls.append({"id": call_id, "type": "function", "function": {
                    "name": name, "arguments": unwrap_arguments(call.get("args") or {})}})
                self.pending.append((call_id, name))
        message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
        if calls:
            message["tool_calls"] = calls
        self.messages.append(message)

    def user(self, parts: list[Any]) -> None:
        blocks: list[dict[str, Any]] = []
        for part in parts:
            if not isinstance(part, dict) or part.get("thought"):
                continue
            if isinstance(part.get("text"), str):
                blocks.append({"type": "text", "text": part["text"]})
            elif isinstance(part.get("functionResponse"), dict):
                result = part["functionResponse"]
                self.messages.append({"role": "tool", "tool_call_id": self._answers(result),
                                      "content": _tool_output(result.get("response"))})
            elif isinstance(part.get("inlineData"), dict):
                data = part["inlineData"]
                if str(data.get("mimeType", "")).startswith("image/"):
                    blocks.append({"type": "image_url",
                                   "image_url": {"url": f"data:{data['mimeType']};base64,{data.get('data', '')}"}})
            # fileData (a URI the policy server cannot fetch), executableCode, …: not sent
        if blocks and all(b["type"] == "text" for b in blocks):
            self.messages.append({"role": "user", "content": "\n\n".join(b["text"] for b in blocks)})
        elif blocks:
            self.messages.append({"role": "user", "content": blocks})

    def _answers(self, result: dict[str, Any]) -> str:
        """The id of the call a function response answers: its own id, else the first open call of that name."""
        wanted, name = result.get("id"), result.get("name")
        for i, (call_id, call_name) in enumerate(self.pending):
            if (wanted and call_id == wanted) or (not wanted and call_name == name):
                del self.pending[i]
                return call_id
        for i, (call_id, call_name) in enumerate(self.pending):
            if call_name == name:
                del self.pending[i]
                return call_id
        return str(wanted or f"call_{self.turn}_{name}")


def _generation(config: dict[str, Any], out: dict[str, Any], limits: Limits) -> None:
    if config.get("candidateCount") not in (None, 1):
        raise BadRequest("only candidateCount=1 is supported: each call is one sample")
    if config.get("maxOutputTokens") is not None:
        out["max_tokens"] = config["maxOutputTokens"]
    elif limits.max_output_tokens > 0:  # Gemini CLI sends no limit: without one it generates to the context's end
        out["max_tokens"] = limits.max_output_tokens
    for src, dst in (("temperature", "temperature"), ("topP", "top_p"), ("topK", "top_k"), ("seed", "seed"),
                     ("stopSequences", "stop"), ("presencePenalty", "presence_penalty"),
                     ("frequencyPenalty", "frequency_penalty")):
        if config.get(src) is not None:
            out[dst] = config[src]
    if config.get("responseLogprobs") and config.get("logprobs"):
        out["top_logprobs"] = config["logprobs"]
    if config.get("responseMimeType") == "application/json":
        json_schema = config.get("responseJsonSchema") or schema(config.get("responseSchema"))
        out["response_format"] = ({"type": "json_schema", "json_schema": {"name": "response", "schema": json_schema}}
                                  if json_schema else {"type": "json_object"})
    # thinkingConfig, responseModalities, speechConfig, mediaResolution, …: nothing the policy server takes


def _tools(obj: dict[str, Any], out: dict[str, Any]) -> None:
    declarations = [d for t in obj.get("tools") or () if isinstance(t, dict)
                    for d in t.get("functionDeclarations") or () if isinstance(d, dict) and d.get("name")]
    if not declarations:
        return  # googleSearch, codeExecution, urlContext: hosted tools no policy server runs
    out["tools"] = [{"type": "function", "function": {
        "name": d["name"], "description": d.get("description", ""),
        "parameters": d.get("parametersJsonSchema") or schema(d.get("parameters")) or {"type": "object",
                                                                                          "properties": {}}}}
        for d in declarations]
    config = (obj.get("toolConfig") or {}).get("functionCallingConfig") or {}
    choice = _MODES.get(str(config.get("mode") or "AUTO").upper(), "auto")
    allowed = config.get("allowedFunctionNames") or []
    if choice == "required" and len(allowed) == 1:
        out["tool_choice"] = {"type": "function", "function": {"name": allowed[0]}}
    else:
        out["tool_choice"] = choice


def to_chat(obj: dict[str, Any], model: str, stream: bool, limits: Limits) -> dict[str, Any]:
    """A ``GenerateContentRequest`` as a Chat Completions request (thinking, safety settings, hosted tools dropped)."""
    if obj.get("cachedContent"):
        raise BadRequest("cachedContent is not supported: forge's proxy stores nothing; send the contents themselves")
    contents = obj.get("contents")
    if not isinstance(contents, list):
        raise BadRequest("contents: field required (a list of Content objects)")
    history = _History()
    system = _text(obj.get("systemInstruction"))
    if system:
        history.messages.append({"role": "system", "content": system})
    for content in contents:
        if not isinstance(content, dict):
            raise BadRequest("each item of contents must be an object")
        role, parts = content.get("role") or "user", content.get("parts") or []
        if not isinstance(parts, list):
            raise BadRequest("contents[].parts must be a list")
        if role == "model":
            history.model(parts)
            history.turn += 1
        elif role in ("user", "function"):
            history.user(parts)
        else:
            raise BadRequest(f"unknown content role {role!r} (user or model)")
    out: dict[str, Any] = {"model": model, "messages": history.messages}
    config = obj.get("generationConfig")
    _generation(config if isinstance(config, dict) else {}, out, limits)
    _tools(obj, out)
    if stream:
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return out


def prepare(body: bytes, limits: Limits, path: str = "") -> Prepared:
    """Translate to Chat Completions with token capture (the model and the method are in ``path``)."""
    model, stream = target(path)
    obj = load_object(body)
    prep = chat.prepare_object(to_chat(obj, model, stream, limits), limits)
    config = obj.get("generationConfig")
    prep.wants_token_ids = False
    prep.wants_logprobs = bool(isinstance(config, dict) and config.get("responseLogprobs"))
    return prep


# -- answer: Chat Completions -> Gemini ----------------------------------------------------------------
def _usage(usage: Any, prompt: int = 0, completion: int = 0) -> dict[str, int]:
    if isinstance(usage, dict):
        prompt = int(usage.get("prompt_tokens") or prompt)
        completion = int(usage.get("completion_tokens") or completion)
    return {"promptTokenCount": prompt, "candidatesTokenCount": completion, "totalTokenCount": prompt + completion}


def _call_part(call: dict[str, Any]) -> dict[str, Any]:
    fn = call.get("function") or {}
    try:
        args = json.loads(fn.get("arguments") or "{}")
    except ValueError:
        args = {"_raw": fn.get("arguments")}
    part: dict[str, Any] = {"name": fn.get("name") or "", "args": args if isinstance(args, dict) else {"value": args}}
    if call.get("id"):
        part = {"id": call["id"], **part}
    return {"functionCall": part}


def _logprobs(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Gemini's ``logprobsResult`` (the sampled tokens; non-finite values as -inf is not JSON: left out)."""
    chosen = [{"token": str(e.get("token") or ""), "logProbability": value} for e in entries
              if math.isfinite(value := logprob(e))]
    return {"chosenCandidates": chosen, "topCandidates": [
        {"candidates": [{"token": str(t.get("token") or ""), "logProbability": t.get("logprob")}
                        for t in e.get("top_logprobs") or ()]} for e in entries if e.get("top_logprobs")]}


def _envelope(chat_obj: dict[str, Any], candidate: dict[str, Any], usage: dict[str, int]) -> dict[str, Any]:
    return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": chat_obj.get("model"),
            "responseId": str(chat_obj.get("id") or "").removeprefix("chatcmpl-")}


def to_response(completion: dict[str, Any], prep: Prepared) -> dict[str, Any]:
    """A ``chat.completion`` object as a ``GenerateContentResponse``."""
    choice = (completion.get("choices") or [{}])[0]
    msg = choice.get("message") or {}
    parts: list[dict[str, Any]] = []
    reasoning = msg.get("reasoning") or msg.get("reasoning_content")
    if reasoning:
        parts.append({"text": reasoning, "thought": True})
    if msg.get("content"):
        parts.append({"text": msg["content"]})
    parts += [_call_part(call) for call in msg.get("tool_calls") or ()]
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts or [{"text": ""}]},
                                 "finishReason": _FINISH.get(choice.get("finish_reason") or "stop", "OTHER"),
                                 "index": 0}
    if prep.wants_logprobs:
        entries = (choice.get("logprobs") or {}).get("content") or []
        candidate["logprobsResult"] = _logprobs(entries)
        if entries:
            candidate["avgLogprobs"] = sum(logprob(e) for e in entries) / len(entries)
    return _envelope(completion, candidate, _usage(completion.get("usage")))


def upstream_answer(response: Any) -> dict[str, Any]:
    """The chat completion a recorded ``GenerateContentResponse`` was translated from (``to_response`` inverted;
    there is no ``created`` to give back: 0). A function call without an ``id`` gets none (``None``): the upstream's
    call had none, or the forward translation would have sent it."""
    try:
        candidate = response["candidates"][0]
        parts = candidate["content"]["parts"]
    except (TypeError, KeyError, IndexError):
        parts = None
    if not isinstance(parts, list):
        raise ValueError("not a Gemini GenerateContentResponse: no candidate with content parts")
    parts = [p for p in parts if isinstance(p, dict)]
    texts = [p for p in parts if isinstance(p.get("text"), str)]
    calls = [chat_call(fc.get("id") or None, fc.get("name") or "", unwrap_arguments(fc.get("args") or {}, "value"))
             for p in parts if isinstance(fc := p.get("functionCall"), dict)]
    finish = _STOP.get(str(candidate.get("finishReason")), "stop")
    return chat_answer("chatcmpl-" + str(response.get("responseId") or ""), 0, response.get("modelVersion"),
                       "".join(p["text"] for p in texts if not p.get("thought")),
                       "tool_calls" if calls and finish == "stop" else finish, calls,
                       "".join(p["text"] for p in texts if p.get("thought")))


def client_body(upstream: bytes, prep: Prepared) -> bytes:
    """A non-streamed chat answer as a Gemini answer (upstream errors are reshaped by the addon)."""
    return translate_answer(upstream, lambda obj: to_response(obj, prep))


class ClientStream(TranslatedStream):
    """Chat Completion chunks in, ``data: <GenerateContentResponse>`` chunks out (Gemini's ``alt=sse``)."""

    __slots__ = ("_prep",)

    def __init__(self, prep: Prepared) -> None:
        super().__init__()  # streamed tool calls are kept in the decoder and sent whole at the end
        self._prep = prep

    def fail(self, message: str) -> bytes:
        """The chunk that ends the stream in error (the upstream's stream broke off)."""
        return b"data: " + gemini_error(502, message, "upstream_error") + b"\n\n"

    def _emit(self, out: list[bytes], candidate: dict[str, Any], usage: dict[str, int]) -> None:
        out.append(sse.encode(_envelope(self._chat.head, candidate, usage)))

    def _counts(self) -> tuple[int, int]:
        return len(self._chat.prompt_token_ids or ()), len(self._chat.token_ids)

    def _event(self, chunk: dict[str, Any], out: list[bytes]) -> None:
        for delta in self._chat.absorb(chunk):
            parts: list[dict[str, Any]] = []
            if delta.reasoning:
                parts.append({"text": delta.reasoning, "thought": True})
            if delta.content:
                parts.append({"text": delta.content})
            if parts:
                candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
                if self._prep.wants_logprobs and delta.logprobs_sent:
                    candidate["logprobsResult"] = _logprobs(delta.logprobs)
                self._emit(out, candidate, _usage(None, *self._counts()))

    def _end(self, out: list[bytes]) -> None:
        if self.done or not self._chat.started:
            return
        self.done = True
        if self._chat.error is not None:  # vLLM reports a failure mid-stream as an error chunk before [DONE]
            error: dict[str, Any] = (self._chat.error if isinstance(self._chat.error, dict)
                                     else {"message": str(self._chat.error)})
            code = error["code"] if isinstance(error.get("code"), int) else 500
            out.append(b"data: " + gemini_error(code, str(error.get("message") or ""), "upstream_error") + b"\n\n")
            return
        parts = [_call_part(call) for call in self._chat.tool_calls()] or [{"text": ""}]
        candidate = {"content": {"role": "model", "parts": parts},
                     "finishReason": _FINISH.get(self._chat.finish_reason or "stop", "OTHER"), "index": 0}
        self._emit(out, candidate, _usage(self._chat.usage, *self._counts()))


def assemble(upstream: bytes, streamed: bool, prep: Prepared) -> Assembled:
    """The Gemini answer the client got (a stream's chunks merged into one response), with the chat upstream's
    token ids and logprobs."""
    full = Prepared(body=b"", changed=True, wants_token_ids=True, wants_logprobs=True)  # keep every capture field
    result = chat.assemble(upstream, streamed, full)
    if isinstance(result.response, dict) and "choices" in result.response:
        result.response = to_response(result.response, prep)
    return result


def _matches(path: str) -> bool:
    return ":" in path and GEMINI_PATH.match(path) is not None


FORMAT = register_wire_format(WireFormat(
    name="gemini", paths=(), prepare=prepare, client_body=client_body, client_stream=ClientStream, assemble=assemble,
    error=gemini_error, reshapes_errors=True, matches=_matches, upstream_answer=upstream_answer))
