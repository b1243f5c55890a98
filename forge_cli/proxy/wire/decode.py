"""The one decoder of an upstream Chat Completions stream, which the translated formats and the record build on.

``ChatStreamDecoder`` splits the upstream's SSE bytes into chunk objects and folds each chunk into the stream's
totals: head (id, created, model), prompt token ids, usage, a mid-stream error, finish reason, text, reasoning,
tool calls (their deltas joined by index), completion token ids and logprob entries. ``absorb`` returns the
chunk's per-choice deltas (``ChoiceDelta``) for a translator to turn into its own events; ``completion`` is the
whole stream as one ``chat.completion`` object.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any

from forge_cli.proxy.wire import sse

DONE = None  # what ``feed`` yields for the terminal ``data: [DONE]`` event


@dataclass(slots=True)
class ChoiceDelta:
    """What one chunk's choice added: text, reasoning, raw tool-call deltas, token ids, logprob entries."""

    content: str
    reasoning: str
    tool_calls: list[dict[str, Any]]
    token_ids: list[int]
    logprobs: list[dict[str, Any]]
    logprobs_sent: bool  # the choice had a ``logprobs`` object (possibly with no entries)
    finish_reason: str | None


class ChatStreamDecoder:
    """Chat Completion chunks in; the stream's totals kept, each chunk's deltas handed back (module docstring)."""

    __slots__ = ("content", "error", "finish_reason", "head", "logprobs", "prompt_token_ids", "reasoning",
                 "split", "terminal", "token_ids", "tools", "usage")

    def __init__(self) -> None:
        self.split = sse.SSESplitter()
        self.head: dict[str, Any] = {}  # id, created, model, system_fingerprint of the first chunk
        self.prompt_token_ids: list[int] | None = None
        self.usage: Any = None
        self.error: Any = None
        self.finish_reason: Any = None
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.tools: dict[Any, dict[str, Any]] = {}
        self.token_ids: list[int] = []
        self.logprobs: list[dict[str, Any]] = []
        self.terminal = False  # ``[DONE]`` seen

    @property
    def started(self) -> bool:
        """Has a chunk object arrived?"""
        return bool(self.head)

    def feed(self, data: bytes) -> list[dict[str, Any] | None]:
        """The chunk objects of ``data``'s complete events (``b""``: the rest), ``DONE`` for ``[DONE]``; events that
        are not a JSON object are skipped. Nothing is absorbed: call ``absorb`` for each chunk wanted."""
        return self.events(self.split.feed(data) if data else self.split.flush())

    def events(self, events: list[bytes]) -> list[dict[str, Any] | None]:
        """``feed`` for events already split."""
        out: list[dict[str, Any] | None] = []
        for raw in events:
            if raw.startswith(b"data: [DONE]"):
                self.terminal = True
                out.append(DONE)
                continue
            _, chunk = sse.event_json(raw)
            if isinstance(chunk, dict):
                out.append(chunk)
        return out

    def absorb(self, chunk: dict[str, Any]) -> list[ChoiceDelta]:
        """Fold one chunk into the totals; its choices' deltas, in order."""
        if not self.head:
            self.head = {k: chunk.get(k) for k in ("id", "created", "model", "system_fingerprint")}
        if chunk.get("prompt_token_ids") is not None:
            self.prompt_token_ids = chunk["prompt_token_ids"]
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        if chunk.get("error"):
            self.error = chunk["error"]
        deltas: list[ChoiceDelta] = []
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            content = delta.get("content") or ""
            reasoning = delta.get("reasoning") or delta.get("reasoning_content") or ""
            if content:
                self.content.append(content)
            if reasoning:
                self.reasoning.append(reasoning)
            calls = delta.get("tool_calls") or []
            for call in calls:
                self._tool(call)
            token_ids = choice.get("token_ids") or []
            self.token_ids.extend(token_ids)
            lp = choice.get("logprobs")
            entries = (lp.get("content") or []) if isinstance(lp, dict) else []
            self.logprobs.extend(entries)
            finish = choice.get("finish_reason") or None
            if finish:
                self.finish_reason = finish
            deltas.append(ChoiceDelta(content, reasoning, calls, token_ids, entries, isinstance(lp, dict), finish))
        return deltas

    def _tool(self, call: dict[str, Any]) -> None:
        slot = self.tools.setdefault(call.get("index", len(self.tools)),
                                     {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
        if call.get("id"):
            slot["id"] = call["id"]
        fn = call.get("function") or {}
        if fn.get("name"):
            slot["function"]["name"] += fn["name"]
        if fn.get("arguments"):
            slot["function"]["arguments"] += fn["arguments"]

    def tool_calls(self) -> list[dict[str, Any]]:
        """The streamed tool calls, whole, in index order."""
        return [self.tools[i] for i in sorted(self.tools)]

    def completion(self, wants_token_ids: bool, wants_logprobs: bool) -> dict[str, Any]:
        """The stream as one ``chat.completion`` object (capture fields as the client asked for them)."""
        message: dict[str, Any] = {"role": "assistant",
                                   "content": "".join(self.content) if self.content or not self.tools else None}
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.tools:
            message["tool_calls"] = self.tool_calls()
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": self.finish_reason,
                                  "logprobs": {"content": self.logprobs} if wants_logprobs else None}
        if wants_token_ids:
            choice["token_ids"] = self.token_ids
        response: dict[str, Any] = {**self.head, "object": "chat.completion", "choices": [choice],
                                    "usage": self.usage}
        if wants_token_ids:
            response["prompt_token_ids"] = self.prompt_token_ids
        return response


class TranslatedStream(abc.ABC):
    """Base of a translated format's ``ClientStream``: the upstream's chunks go through one ``ChatStreamDecoder``
    (``self._chat``) to the subclass's ``_event`` (each chunk object, until the stream is done) and ``_end`` (the
    upstream's ``[DONE]``), which append the client's events to ``out``."""

    __slots__ = ("_chat", "done")

    def __init__(self) -> None:
        self._chat = ChatStreamDecoder()
        self.done = False

    def feed(self, chunk: bytes) -> bytes:
        """The client's events for ``chunk``; ``b""`` ends the stream."""
        out: list[bytes] = []
        for item in self._chat.feed(chunk):
            if item is DONE:
                self._end(out)
            elif not self.done:
                self._event(item, out)
        return b"".join(out)

    @abc.abstractmethod
    def _event(self, chunk: dict[str, Any], out: list[bytes]) -> None:
        """The client's events for one decoded Chat Completions chunk (appended to ``out``)."""

    @abc.abstractmethod
    def _end(self, out: list[bytes]) -> None:
        """The client's closing events when the upstream stream ends (appended to ``out``)."""
