"""OpenAI Responses API, served by translation to Chat Completions.

vLLM's own ``/v1/responses`` gives logprobs for output text only (none for tool-call tokens or the stop
token), so a record could not be token-exact. As with Anthropic Messages, the proxy rewrites each
Responses request into a Chat Completions request (token ids and a logprob for every sampled token) and
translates the answer back: JSON to a ``response`` object, SSE chunks to the Responses event sequence
(``response.created`` … ``response.completed``, with ``sequence_number``) that Codex and the official
SDKs read. Item ids derive from the chat completion id, so the record's assembled response is exactly
what the client saw. ``previous_response_id``/``conversation`` are refused: nothing is stored upstream.
"""

from __future__ import annotations

from typing import Any

from forge_cli.proxy.wire import chat, sse
from forge_cli.proxy.wire.base import (
    Assembled,
    BadRequest,
    Limits,
    Prepared,
    WireFormat,
    chat_answer,
    chat_call,
    load_object,
    openai_error,
    register_wire_format,
    translate_answer,
)
from forge_cli.proxy.wire.decode import TranslatedStream

LOGPROBS_INCLUDE = "message.output_text.logprobs"
_TOOL_CALLS = ("function_call", "custom_tool_call")
_TOOL_OUTPUTS = ("function_call_output", "custom_tool_call_output")
_TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text", "refusal")


# -- request: Responses -> Chat Completions ------------------------------------------------------------
def _text(content: Any) -> str:
    """Plain text of a string or a list of text parts."""
    if isinstance(content, str):
        return content
    return "".join(str(p.get("text") or p.get("refusal") or "") for p in content or ()
                   if isinstance(p, dict) and p.get("type") in _TEXT_PARTS)


def _parts(content: Any) -> Any:
    """Message content for Chat: a string stays one; text parts become ``text``, images ``image_url``."""
    if isinstance(content, str) or content is None:
        return content or ""
    out: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS:
            out.append({"type": "text", "text": _text([part])})
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            image: dict[str, Any] = {"url": part["image_url"]}
            if part.get("detail"):
                image["detail"] = part["detail"]
            out.append({"type": "image_url", "image_url": image})
    return out


def _assistant(messages: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """The previous assistant message when its ``key`` slot is still free (one generated turn), else a new one."""
    last = messages[-1] if messages else None
    if last is not None and last.get("role") == "assistant" and not last.get(key):
        return last
    message: dict[str, Any] = {"role": "assistant", "content": None}
    messages.append(message)
    return message


def _input_item(item: Any, messages: list[dict[str, Any]]) -> None:
    if not isinstance(item, dict):
        raise BadRequest("each input item must be an object")
    kind = item.get("type") or ("message" if "role" in item else None)
    if kind == "message":
        role = item.get("role")
        if role == "assistant":
            text = _text(item.get("content"))
            target = _assistant(messages, "content")
            target["content"] = text if target["content"] is None else target["content"] + text
        elif role in ("user", "system", "developer"):
            messages.append({"role": role, "content": _parts(item.get("content"))})
        else:
            raise BadRequest(f"unknown message role {role!r}")
    elif kind in _TOOL_CALLS:
        args = item.get("arguments") if kind == "function_call" else item.get("input")
        name = _flat(item["namespace"], item.get("name")) if item.get("namespace") else item.get("name")
        call = {"id": item.get("call_id"), "type": "function",
                "function": {"name": name, "arguments": args if isinstance(args, str) else ""}}
        target = _assistant(messages, "")
        target.setdefault("tool_calls", []).append(call)
    elif kind in _TOOL_OUTPUTS:
        output = item.get("output")
        messages.append({"role": "tool", "tool_call_id": item.get("call_id"),
                         "content": output if isinstance(output, str) else _text(output)})
    elif kind == "reasoning":
        text = _text(item.get("content")) or _text(item.get("summary"))
        if text:  # encrypted-only reasoning (from another provider) has nothing the policy can read
            _assistant(messages, "reasoning")["reasoning"] = text
    elif kind == "item_reference":
        raise BadRequest("input items of type item_reference are not supported: nothing is stored, "
                         "send the items themselves")
    # hosted-tool items (web_search_call, local_shell_call, …) never come from a policy served here: dropped


def _flat(namespace: Any, name: Any) -> str:
    """The Chat name of a namespaced tool (Codex groups MCP tools as namespace ``mcp__<server>``)."""
    return f"{namespace}__{name}"


def _function_tools(tools: Any) -> tuple[list[dict[str, Any]], dict[str, tuple[str, str]]]:
    """Function tools, those inside ``namespace`` tools flattened to ``<namespace>__<name>``, and that mapping."""
    flat: list[dict[str, Any]] = []
    names: dict[str, tuple[str, str]] = {}
    for tool in tools or ():
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "function":
            flat.append(tool)
        elif tool.get("type") == "namespace" and tool.get("name"):
            for inner in tool.get("tools") or ():
                if isinstance(inner, dict) and inner.get("type") == "function" and inner.get("name"):
                    name = _flat(tool["name"], inner["name"])
                    names[name] = (str(tool["name"]), str(inner["name"]))
                    flat.append({**inner, "name": name})
    return flat, names


def _tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and choice.get("name"):
        return {"type": "function", "function": {"name": choice["name"]}}
    return "auto"


def to_chat(obj: dict[str, Any], limits: Limits) -> dict[str, Any]:
    """A Responses request as a Chat Completions request (non-function tools, include, store, … dropped)."""
    for key in ("previous_response_id", "conversation"):
        if obj.get(key):
            raise BadRequest(f"{key} is not supported: forge's proxy stores no responses; send the whole "
                             "conversation in input")
    messages: list[dict[str, Any]] = []
    if obj.get("instructions"):
        messages.append({"role": "system", "content": _text(obj["instructions"])})
    items = obj.get("input")
    if isinstance(items, str):
        messages.append({"role": "user", "content": items})
    elif isinstance(items, list):
        for item in items:
            _input_item(item, messages)
    else:
        raise BadRequest("input: field required (a string or a list of items)")
    out: dict[str, Any] = {"model": obj.get("model"), "messages": messages}
    if obj.get("max_output_tokens") is not None:
        out["max_tokens"] = obj["max_output_tokens"]
    elif limits.max_output_tokens > 0:  # Codex sends no limit: without one it generates to the context's end
        out["max_tokens"] = limits.max_output_tokens
    for key in ("temperature", "top_p", "parallel_tool_calls"):
        if obj.get(key) is not None:
            out[key] = obj[key]
    tools, _ = _function_tools(obj.get("tools"))
    if tools:
        out["tools"] = [{"type": "function", "function": {k: t[k] for k in ("name", "description", "parameters",
                                                                              "strict") if t.get(k) is not None}}
                        for t in tools]
        out["tool_choice"] = _tool_choice(obj.get("tool_choice", "auto"))
    fmt = (obj.get("text") or {}).get("format") if isinstance(obj.get("text"), dict) else None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        out["response_format"] = {"type": "json_schema", "json_schema": {
            k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}}
    elif isinstance(fmt, dict) and fmt.get("type") == "json_object":
        out["response_format"] = {"type": "json_object"}
    if LOGPROBS_INCLUDE in (obj.get("include") or ()) and obj.get("top_logprobs"):
        out["top_logprobs"] = obj["top_logprobs"]
    if obj.get("stream"):
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return out


def prepare(body: bytes, limits: Limits, path: str = "") -> Prepared:
    """Translate to Chat Completions with token capture; remember whether the client asked for logprobs
    (``include: ["message.output_text.logprobs"]``) or token ids (vLLM's ``enable_response_messages``)."""
    obj = load_object(body)
    prep = chat.prepare_object(to_chat(obj, limits), limits)
    prep.wants_logprobs = LOGPROBS_INCLUDE in (obj.get("include") or ())
    prep.wants_token_ids = bool(obj.get("enable_response_messages"))
    prep.namespaced = _function_tools(obj.get("tools"))[1] or None
    return prep


# -- answer: Chat Completions -> Responses -------------------------------------------------------------
def _base(chat_id: Any) -> str:
    return str(chat_id or "0").removeprefix("chatcmpl-")


def _head(chunk: dict[str, Any]) -> dict[str, Any]:
    """The response object's fixed fields, from a chat completion or its first chunk."""
    return {"id": "resp_" + _base(chunk.get("id")), "object": "response", "created_at": chunk.get("created"),
            "model": chunk.get("model"), "status": "in_progress", "error": None, "incomplete_details": None,
            "output": [], "usage": None}


def _usage(usage: Any) -> dict[str, Any] | None:
    if not isinstance(usage, dict):
        return None
    prompt, completion = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": int(usage.get("total_tokens") or prompt + completion)}


def _finish(response: dict[str, Any], finish_reason: Any, usage: Any) -> None:
    """Final status (vLLM's way: an output limit is ``incomplete`` inside ``response.completed``) and usage."""
    response["status"] = "incomplete" if finish_reason == "length" else "completed"
    response["incomplete_details"] = {"reason": "max_output_tokens"} if finish_reason == "length" else None
    response["usage"] = _usage(usage)


def _token_messages(response: dict[str, Any], prompt_ids: Any, completion_ids: Any, text: str) -> None:
    """vLLM's ``enable_response_messages`` fields, for a client that asked for token ids."""
    response["input_messages"] = [{"type": "raw_message_tokens", "message": "", "tokens": prompt_ids or []}]
    response["output_messages"] = [{"type": "raw_message_tokens", "message": text, "tokens": completion_ids or []}]


def _text_part(text: str, logprobs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs}


def _message_item(item_id: str, text: str, logprobs: list[dict[str, Any]], status: str) -> dict[str, Any]:
    return {"id": item_id, "type": "message", "role": "assistant", "status": status,
            "content": [_text_part(text, logprobs)] if status == "completed" else []}


def _call_item(item_id: str, call_id: str, name: str, arguments: str, status: str,
               prep: Prepared) -> dict[str, Any]:
    """A ``function_call`` item; a namespaced tool's call names its namespace and its own name again."""
    item = {"id": item_id, "type": "function_call", "status": status, "call_id": call_id, "name": name,
            "arguments": arguments}
    if prep.namespaced and name in prep.namespaced:
        item["namespace"], item["name"] = prep.namespaced[name]
    return item


def _reasoning_item(item_id: str, text: str | None) -> dict[str, Any]:
    item: dict[str, Any] = {"id": item_id, "type": "reasoning", "summary": []}
    if text is not None:
        item["content"] = [{"type": "reasoning_text", "text": text}]
    return item


def _text_logprobs(entries: list[dict[str, Any]], text: str, calls: bool) -> list[dict[str, Any]]:
    """The logprob entries of the message text: all of them, or with tool calls the ones that spell the text."""
    if not calls:
        return entries
    covered, out = 0, []
    for entry in entries:
        if covered >= len(text):
            break
        out.append(entry)
        covered += len(str(entry.get("token") or ""))
    return out


def to_response(completion: dict[str, Any], prep: Prepared) -> dict[str, Any]:
    """A ``chat.completion`` object (capture fields still in it) as a Responses ``response``."""
    choice = (completion.get("choices") or [{}])[0]
    msg = choice.get("message") or {}
    base = _base(completion.get("id"))
    response = _head(completion)
    output: list[dict[str, Any]] = response["output"]
    reasoning = msg.get("reasoning") or msg.get("reasoning_content")
    if reasoning:
        output.append(_reasoning_item("rs_" + base, reasoning))
    calls = msg.get("tool_calls") or []
    text = msg.get("content") or ""
    if text or not (calls or output):
        entries = ((choice.get("logprobs") or {}).get("content") or []) if prep.wants_logprobs else []
        output.append(_message_item("msg_" + base, text, _text_logprobs(entries, text, bool(calls)), "completed"))
    for i, call in enumerate(calls):
        fn = call.get("function") or {}
        output.append(_call_item(f"fc_{base}_{i}", call.get("id") or f"call_{base}_{i}", fn.get("name") or "",
                                 fn.get("arguments") or "", "completed", prep))
    _finish(response, choice.get("finish_reason"), completion.get("usage"))
    if prep.wants_token_ids:
        _token_messages(response, completion.get("prompt_token_ids"), choice.get("token_ids"), text)
    return response


def upstream_answer(response: Any) -> dict[str, Any]:
    """The chat completion a recorded ``response`` was translated from (``to_response`` inverted; a namespaced
    tool's call by its flat Chat name again); ``ValueError`` for a failed or unfinished one."""
    if not (isinstance(response, dict) and response.get("object") == "response"
            and isinstance(response.get("output"), list) and response.get("status") in ("completed", "incomplete")):
        raise ValueError("not a finished Responses response")
    items = [i for i in response["output"] if isinstance(i, dict)]
    calls = [chat_call(i.get("call_id"), _flat(i["namespace"], i.get("name")) if i.get("namespace") else i.get("name"),
                       str(i.get("arguments") or "")) for i in items if i.get("type") == "function_call"]
    text = "".join(_text(i.get("content")) for i in items if i.get("type") == "message")
    reasoning = "".join(_text(i.get("content")) or _text(i.get("summary"))
                        for i in items if i.get("type") == "reasoning")
    finish = "length" if response["status"] == "incomplete" else "tool_calls" if calls else "stop"
    return chat_answer("chatcmpl-" + str(response.get("id") or "").removeprefix("resp_"), response.get("created_at"),
                       response.get("model"), text, finish, calls, reasoning)


def client_body(upstream: bytes, prep: Prepared) -> bytes:
    """A non-streamed chat answer as a Responses answer (errors pass through: same shape as OpenAI's)."""
    return translate_answer(upstream, lambda obj: to_response(obj, prep))


class ClientStream(TranslatedStream):
    """Chat Completion chunks in, Responses events out: one output item open at a time, in output order."""

    __slots__ = ("_base", "_calls", "_error", "_item", "_kind", "_lps", "_pieces", "_prep", "_response", "_seq",
                 "_tool_index")

    def __init__(self, prep: Prepared) -> None:
        super().__init__()
        self._prep = prep
        self._seq = 0
        self._response: dict[str, Any] | None = None
        self._base = ""
        self._item: dict[str, Any] | None = None  # the open output item (as added, status in_progress)
        self._kind: str | None = None
        self._pieces: list[str] = []  # text / arguments / reasoning of the open item
        self._lps: list[dict[str, Any]] = []  # logprob entries of the open message's text
        self._tool_index: int | None = None
        self._calls = 0
        self._error: Any = None  # a mid-stream error chunk's, or the broken stream's (``fail``)

    def snapshot(self) -> dict[str, Any] | None:
        """The response as far as it got (finished items plus the open one); the final one once done."""
        if self._response is None:
            return None
        if self.done or self._item is None:
            return self._response
        return {**self._response, "output": [*self._response["output"], self._item]}

    def fail(self, message: str) -> bytes:
        """End the stream as failed (the upstream's stream broke off): ``response.failed``, or a lone ``error``
        event before anything was generated."""
        if self.done:
            return b""
        out: list[bytes] = []
        if self._response is None:
            self.done = True
            self._emit(out, "error", {"code": "upstream_error", "message": message, "param": None})
        else:
            self._error = {"code": "upstream_error", "message": message}
            self._end(out)
        return b"".join(out)

    def _emit(self, out: list[bytes], kind: str, fields: dict[str, Any]) -> None:
        out.append(sse.encode({"type": kind, "sequence_number": self._seq, **fields}, kind))
        self._seq += 1

    def _event(self, chunk: dict[str, Any], out: list[bytes]) -> None:
        if self._response is None:
            self._response = _head(chunk)
            self._base = _base(chunk.get("id"))
            self._emit(out, "response.created", {"response": self._response})
            self._emit(out, "response.in_progress", {"response": self._response})
        for delta in self._chat.absorb(chunk):
            if delta.reasoning:
                self._reasoning_delta(out, delta.reasoning)
            if delta.content:
                self._text_delta(out, delta.content, delta.logprobs if self._prep.wants_logprobs else [])
            for call in delta.tool_calls:
                self._call_delta(out, call)
        if self._chat.error is not None:
            self._error = self._chat.error

    def _open(self, out: list[bytes], kind: str, item: dict[str, Any]) -> None:
        self._close(out)
        self._kind, self._item = kind, item
        self._pieces, self._lps = [], []
        assert self._response is not None
        self._emit(out, "response.output_item.added", {"output_index": len(self._response["output"]), "item": item})

    def _reasoning_delta(self, out: list[bytes], delta: str) -> None:
        if self._kind != "reasoning":
            self._open(out, "reasoning", _reasoning_item(self._item_id("rs_" + self._base), None))
        self._pieces.append(delta)
        self._emit(out, "response.reasoning_text.delta", {**self._where(), "content_index": 0, "delta": delta})

    def _text_delta(self, out: list[bytes], delta: str, entries: list[dict[str, Any]]) -> None:
        if self._kind != "message":
            item_id = self._item_id("msg_" + self._base)
            self._open(out, "message", _message_item(item_id, "", [], "in_progress"))
            self._emit(out, "response.content_part.added", {**self._where(), "content_index": 0,
                                                            "part": _text_part("", [])})
        self._pieces.append(delta)
        self._lps.extend(entries)
        self._emit(out, "response.output_text.delta", {**self._where(), "content_index": 0, "delta": delta,
                                                       "logprobs": entries})

    def _call_delta(self, out: list[bytes], call: dict[str, Any]) -> None:
        fn = call.get("function") or {}
        index = call.get("index", 0)
        if self._kind != "function_call" or index != self._tool_index:
            self._tool_index = index
            n = self._calls
            self._calls += 1
            call_id = call.get("id") or f"call_{self._base}_{n}"
            self._open(out, "function_call", _call_item(f"fc_{self._base}_{n}", call_id, fn.get("name") or "", "",
                                                        "in_progress", self._prep))
        if fn.get("arguments"):
            self._pieces.append(fn["arguments"])
            self._emit(out, "response.function_call_arguments.delta", {**self._where(), "delta": fn["arguments"]})

    def _item_id(self, first: str) -> str:
        """``first`` for the first item of its kind, then suffixed by output index (text after a tool call)."""
        assert self._response is not None
        taken = {item["id"] for item in self._response["output"]}
        return first if first not in taken else f"{first}_{len(self._response['output'])}"

    def _where(self) -> dict[str, Any]:
        assert self._item is not None and self._response is not None
        return {"item_id": self._item["id"], "output_index": len(self._response["output"])}

    def _close(self, out: list[bytes]) -> None:
        if self._item is None or self._response is None:
            return
        item, text, where = self._item, "".join(self._pieces), self._where()
        if self._kind == "message":
            part = _text_part(text, self._lps)
            self._emit(out, "response.output_text.done", {**where, "content_index": 0, "text": text,
                                                          "logprobs": self._lps})
            self._emit(out, "response.content_part.done", {**where, "content_index": 0, "part": part})
            done = _message_item(item["id"], text, self._lps, "completed")
        elif self._kind == "function_call":
            self._emit(out, "response.function_call_arguments.done", {**where, "name": item["name"],
                                                                      "arguments": text})
            done = {**item, "status": "completed", "arguments": text}
        else:
            self._emit(out, "response.reasoning_text.done", {**where, "content_index": 0, "text": text})
            done = _reasoning_item(item["id"], text)
        self._emit(out, "response.output_item.done", {"output_index": where["output_index"], "item": done})
        self._response["output"].append(done)
        self._item = self._kind = None

    def _end(self, out: list[bytes]) -> None:
        if self.done or self._response is None:
            return
        self.done = True
        if self._error is not None:  # vLLM reports a failure mid-stream as an error chunk before [DONE]
            self._close(out)
            error = self._error if isinstance(self._error, dict) else {"message": str(self._error)}
            self._response.update(status="failed", error={"code": str(error.get("code") or "server_error"),
                                                          "message": str(error.get("message") or "")})
            self._emit(out, "response.failed", {"response": self._response})
            return
        if self._item is None and not self._response["output"]:  # nothing generated: one empty message
            self._open(out, "message", _message_item(self._item_id("msg_" + self._base), "", [], "in_progress"))
            self._emit(out, "response.content_part.added", {**self._where(), "content_index": 0,
                                                            "part": _text_part("", [])})
        self._close(out)
        _finish(self._response, self._chat.finish_reason, self._chat.usage)
        if self._prep.wants_token_ids:
            text = "".join(p["text"] for i in self._response["output"] if i["type"] == "message" for p in i["content"])
            _token_messages(self._response, self._chat.prompt_token_ids, self._chat.token_ids, text)
        self._emit(out, "response.completed", {"response": self._response})


def assemble(upstream: bytes, streamed: bool, prep: Prepared) -> Assembled:
    """The Responses answer the client got, with the chat upstream's token ids and logprobs."""
    full = Prepared(body=b"", changed=True, wants_token_ids=True, wants_logprobs=True)  # keep every capture field
    result = chat.assemble(upstream, streamed, full)
    if not streamed:
        if isinstance(result.response, dict) and "choices" in result.response:
            result.response = to_response(result.response, prep)
        return result
    stream = ClientStream(prep)  # replayed: the record holds exactly the events' final response
    stream.feed(upstream)
    stream.feed(b"")
    snapshot = stream.snapshot()
    if snapshot is not None:
        result.response = snapshot
    result.complete = result.complete and stream.done
    return result


FORMAT = register_wire_format(WireFormat(
    name="responses", paths=("/v1/responses", "/responses"), prepare=prepare, client_body=client_body,
    client_stream=ClientStream, assemble=assemble, error=openai_error, reshapes_errors=False,
    upstream_answer=upstream_answer))
