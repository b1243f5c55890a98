"""Chat messages as vLLM hands them to a chat template, so that text rendered here (SFT samples from a teacher's
records, ``forge_cli.train.sft``) has the ids the student's vLLM would give the same request.

vLLM does not pass a request's messages to the template as sent. Mirrored here, for the server forge runs:

- each content (None, a string, or a list of text parts) becomes one string, its texts joined by newlines, or, for a
  template that loops over a message's content (vLLM's "openai" content format), a list of text parts; tool
  results are always one string;
- a line starting Claude Code's ``x-anthropic-billing-header`` is dropped from system texts;
- an assistant's ``reasoning`` is also given as ``reasoning_content``; tool-call ``arguments`` given as JSON strings
  are parsed into objects;
- where a ``developer`` message is sent to a template that does not name that role, developer messages become system
  messages, and all system messages are merged, in order, into one at the front (joined by a blank line).

Tests on the records of real harnesses (pi, Codex, Claude Code: ``tests/train/test_sft_samples.py``,
``tests/train/test_sft_wire_formats.py``) pin the rendered ids to the ``prompt_token_ids`` vLLM returns.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Sequence
from typing import Any

from forge_cli.errors import UserError


def _parsed_arguments(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with each assistant tool call's JSON-string ``arguments`` parsed into an object (what vLLM hands
    the chat template; a string that is not JSON is left as it is)."""
    out = []
    for message in messages:
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        if not calls:
            out.append(message)
            continue
        parsed = []
        for call in calls:
            function = dict(call.get("function") or {})
            if isinstance(function.get("arguments"), str):
                with contextlib.suppress(json.JSONDecodeError):
                    function["arguments"] = json.loads(function["arguments"])
            parsed.append({**call, "function": function})
        out.append({**message, "tool_calls": parsed})
    return out


# content part types whose text vLLM joins into a message's string content (the rest is media: no SFT from it)
_TEXT_PARTS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal",
               "thinking": "thinking"}
_BILLING_HEADER = "x-anthropic-billing-header"  # Claude Code's per-request system line, which vLLM drops
# a chat template that loops over a message's content reads it as OpenAI parts (vLLM's "openai" content format)
_ITERATES_CONTENT = re.compile(r"for\s+\w+\s+in\s+\w+\s*(?:\.content|\[\s*['\"]content['\"]\s*\])")


def _texts(content: Any, where: str) -> list[str]:
    """The texts of a message's ``content`` (a string, None, or a list of parts)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [content]
    texts = []
    for part in content if isinstance(content, list) else [content]:
        if isinstance(part, str):
            texts.append(part)
            continue
        key = _TEXT_PARTS.get(str(part.get("type"))) if isinstance(part, dict) else None
        if key is None:
            raise UserError(f"{where}: a message holds a {part.get('type') if isinstance(part, dict) else part!r} "
                            "content part; only text is rendered", exit_code=2)
        texts.append(str(part.get(key) or ""))
    return texts


def as_vllm_renders(messages: Sequence[dict[str, Any]], template: str, where: str) -> list[dict[str, Any]]:
    """``messages`` as vLLM hands them to the chat ``template``: each content (None, a string or text parts) one
    string, its texts joined by newlines, or, for a template that loops over content, a list of text parts;
    Claude Code's billing-header line dropped from system texts; an assistant's ``reasoning`` also as
    ``reasoning_content``; tool-call arguments parsed; developer messages as system ones where the template does not
    know the role (see the module's docstring)."""
    parts = bool(_ITERATES_CONTENT.search(template))
    out = []
    for message in _parsed_arguments(messages):
        texts = _texts(message.get("content"), where)
        if message.get("role") == "system":
            texts = [t.partition("\n")[2] if t.startswith(_BILLING_HEADER) else t for t in texts
                     if not (t.startswith(_BILLING_HEADER) and not t.partition("\n")[2])]
        content: Any = "\n".join(texts)
        if parts and message.get("role") != "tool":
            content = [{"type": "text", "text": t} for t in texts]
        rendered = {**message, "content": content}
        if message.get("role") == "assistant" and message.get("reasoning") is not None:
            rendered["reasoning_content"] = message["reasoning"]
        out.append(rendered)
    if any(m.get("role") == "developer" for m in out) and not re.search(r"[\"']developer[\"']", template):
        out = _as_system(out)
    return out


def _as_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Developer messages as system messages (without a ``tools`` key), and, where a system message is not first
    or not alone, every system message's non-empty text merged into one at the front, joined by a blank line."""
    converted = [{k: v for k, v in m.items() if k != "tools"} | {"role": "system"} if m.get("role") == "developer"
                 else m for m in messages]
    systems = [i for i, m in enumerate(converted) if m.get("role") == "system"]
    if not systems or systems == [0]:
        return converted
    texts = []
    for i in systems:
        content = converted[i].get("content")
        text = "\n".join(str(p.get("text", "")) for p in content) if isinstance(content, list) else str(content or "")
        if text:
            texts.append(text)
    return [{"role": "system", "content": "\n\n".join(texts)},
            *(m for m in converted if m.get("role") != "system")]


