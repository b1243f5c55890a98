"""Tool-call formats the default model (SmolLM2-135M-Instruct) can be asked to answer in, for
``benchmarks/tool_call_rate.py``: each is a chat template for a first request (system, user, tools) and a parser of
the raw reply. A reply is judged by :func:`judge`: a structured call, naming a tool the request offered, with
arguments valid against that tool's parameter schema.

- ``hermes`` — forge's template (``forge_cli/serve/chat_template.jinja``, read from there), vLLM's ``hermes``
  parser: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, one call per tag;
- ``smollm2`` — the format SmolLM2-Instruct's function-calling data uses (its model card's instructions, after
  Argilla's Synth-APIGen): the tools as a JSON list inside ``<tools></tools>`` in the system prompt, the answer a
  JSON *list* of calls inside one ``<tool_call></tool_call>`` (vLLM's ``xlam`` parser reads it);
- ``json-list`` — forge's tool listing, but the answer a bare JSON list of calls (also ``xlam``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

_SYSTEM = """{%- if messages and messages[0].role == 'system' -%}
{%- set system = text(messages[0].content) -%}{%- set rest = messages[1:] -%}
{%- else -%}
{%- set system = 'You are a helpful AI assistant named SmolLM, trained by Hugging Face' -%}{%- set rest = messages -%}
{%- endif -%}"""
_TEXT = """{%- macro text(content) -%}
{%- if content is string -%}{{ content }}
{%- elif content is iterable -%}{%- for part in content -%}{%- if part.text is defined -%}{{ part.text }}{%- endif -%}
{%- endfor -%}{%- endif -%}
{%- endmacro -%}"""
_REST = """{{- '<|im_end|>\\n' }}
{%- for message in rest %}{{- '<|im_start|>' + message.role + '\\n' + text(message.content) + '<|im_end|>\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"""
_TOOL_LIST = """{%- for tool in tools %}{{- '\\n' + ((tool.function if tool.function is defined else tool) | tojson) }}
{%- endfor %}"""

SMOLLM2 = _TEXT + _SYSTEM + """{{- '<|im_start|>system\\n' + system }}
{%- if tools %}
{{- '\\n\\nYou are an expert in composing functions. You are given a question and a set of possible functions. '
    + 'Based on the question, you will need to make one or more function/tool calls to achieve the purpose. '
    + 'If none of the functions can be used, point it out and refuse to answer. If the given question lacks the '
    + 'parameters required by the function, also point it out.\\n\\n'
    + 'You have access to the following tools:\\n<tools>' }}
{{- tools | map(attribute='function') | list | tojson }}
{{- '</tools>\\n\\nThe output MUST strictly adhere to the following format, and NO other text MUST be included.\\n'
    + 'The example format is as follows. Please make sure the parameter type is correct. If no function call is '
    + 'needed, please make the tool calls an empty list \\'[]\\'.\\n<tool_call>[\\n{"name": "func_name1", "arguments": '
    + '{"argument1": "value1", "argument2": "value2"}},\\n... (more tool calls as required)\\n]</tool_call>' }}
{%- endif %}""" + _REST

JSON_LIST = _TEXT + _SYSTEM + """{{- '<|im_start|>system\\n' + system }}
{%- if tools %}
{{- '\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query. '
    + 'The functions are listed inside <tools></tools>:\\n<tools>' }}""" + _TOOL_LIST + """
{{- '\\n</tools>\\n\\nTo call functions, reply with a JSON list of calls and nothing else, for example:\\n'
    + '[{"name": "function_name", "arguments": {"argument": "value"}}]' }}
{%- endif %}""" + _REST

_HERMES_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _as_calls(value: Any) -> list[dict[str, Any]] | None:
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in items):
        return None
    return [{"name": c["name"], "arguments": c.get("arguments", c.get("parameters"))} for c in items]


def parse_hermes(reply: str) -> list[dict[str, Any]] | None:
    """Every ``<tool_call>`` holding one JSON object with a name (None: no such call)."""
    calls = []
    for body in _HERMES_CALL.findall(reply):
        parsed = _as_calls(_loads(body))
        if parsed is None or len(parsed) != 1 or isinstance(_loads(body), list):
            return None
        calls += parsed
    return calls or None


def parse_smollm2(reply: str) -> list[dict[str, Any]] | None:
    """One ``<tool_call>`` holding a JSON list of calls (an object alone is taken as a list of one)."""
    found = _HERMES_CALL.findall(reply)
    if len(found) != 1:
        return None
    return _as_calls(_loads(found[0]))


def parse_json_list(reply: str) -> list[dict[str, Any]] | None:
    """The reply (fences and whitespace stripped) as a JSON list of calls."""
    text = reply.strip().removeprefix("```json").removeprefix("```").removesuffix("```").strip()
    value = _loads(text)
    return _as_calls(value) if isinstance(value, list) else None


@dataclass(frozen=True)
class ToolFormat:
    name: str
    template: str
    parse: Callable[[str], list[dict[str, Any]] | None]
    vllm_parser: str  # the vLLM tool-call parser that reads it


FORMATS = {f.name: f for f in (
    ToolFormat("hermes", (REPO / "forge_cli" / "serve" / "chat_template.jinja").read_text(), parse_hermes, "hermes"),
    ToolFormat("smollm2", SMOLLM2, parse_smollm2, "xlam"),
    ToolFormat("json-list", JSON_LIST, parse_json_list, "xlam"),
)}


def judge(calls: list[dict[str, Any]] | None, tools: list[dict[str, Any]]) -> dict[str, bool]:
    """``call``: a structured call was parsed; ``offered``: every call names a tool the request offered;
    ``valid``: and its arguments are an object valid against that tool's parameter schema."""
    import jsonschema

    schemas = {(t.get("function") or t).get("name"): (t.get("function") or t).get("parameters") or {} for t in tools}
    call = bool(calls)
    offered = call and all(c["name"] in schemas for c in calls or [])
    valid = offered
    for c in calls or [] if offered else []:
        arguments = _loads(c["arguments"]) if isinstance(c["arguments"], str) else c["arguments"]
        if not isinstance(arguments, dict):
            valid = False
            break
        try:
            jsonschema.validate(arguments, schemas[c["name"]])
        except (jsonschema.ValidationError, jsonschema.SchemaError):
            valid = False
            break
    return {"call": call, "offered": offered, "valid": valid}
