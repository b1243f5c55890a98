"""The Chat Completions answer a client sees: the prompt's token ids are cut out as bytes before the parse (most of
a vLLM answer), and the result is byte for byte what parsing the whole answer, popping the capture fields and
writing it compactly gives, for any JSON answer (hypothesis) and for the fake vLLM's realistic 83 KB one."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from forge_cli.proxy.wire import chat
from forge_cli.proxy.wire.base import Prepared, dumps
from tests.proxy.fake_upstream import chat_body


def _prep(ids: bool, logprobs: bool) -> Prepared:
    return Prepared(body=b"", changed=True, rewritten=True, wants_token_ids=ids, wants_logprobs=logprobs,
                    stream=False, model="m")


def reference(upstream: bytes, prep: Prepared) -> bytes:
    """client_body as it was before the byte cut: parse all, pop, write compactly."""
    if prep.wants_token_ids and prep.wants_logprobs:
        return upstream
    try:
        obj = json.loads(upstream)
    except ValueError:
        return upstream
    if not isinstance(obj, dict) or "choices" not in obj:
        return upstream
    chat.strip_capture(obj, prep)
    return dumps(obj)


TRICKY = st.sampled_from(['"prompt_token_ids":[1,2]', '\\"prompt_token_ids\\":[3]', "]", "[", "{", "}", "\\", '"',
                          "prompt_token_ids", ",", "é", "\n"])
TEXT = st.lists(st.one_of(TRICKY, st.text(max_size=8)), max_size=6).map("".join)
SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6), TEXT)
VALUE = st.recursive(SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                     st.dictionaries(TEXT, inner, max_size=3)), max_leaves=8)
IDS = st.lists(st.integers(-3, 200_000), max_size=40)


@st.composite
def answers(draw: st.DrawFn) -> bytes:
    """An answer-like object: choices (maybe with their own prompt_token_ids), the top-level ids anywhere among
    other keys, sometimes twice or absent, written compactly, spaced or indented."""
    choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": draw(TEXT)},
                              "logprobs": draw(st.one_of(st.none(), VALUE)), "token_ids": draw(IDS)}
    if draw(st.integers(0, 3)) == 0:
        choice["prompt_token_ids"] = draw(IDS)  # a nested key of that name: must not be cut
    keys: list[tuple[str, Any]] = [("id", draw(TEXT)), ("choices", [choice]), ("usage", draw(VALUE))]
    keys += [(draw(TEXT), draw(VALUE)) for _ in range(draw(st.integers(0, 2)))]
    for _ in range(draw(st.sampled_from([0, 1, 1, 1, 1, 2]))):
        ids = draw(IDS) if draw(st.integers(0, 4)) else draw(VALUE)
        keys.insert(draw(st.integers(0, len(keys))), ("prompt_token_ids", ids))
    style = draw(st.sampled_from(["compact", "spaced", "indented"]))
    body = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in keys) if style == "spaced" else None
    if style == "compact":
        return b"{" + b",".join(json.dumps(k).encode() + b":" + dumps(v) for k, v in keys) + b"}"
    if style == "spaced":
        return ("{ " + str(body) + " }").encode()
    return ("{\n  " + ",\n  ".join(f"{json.dumps(k)} :\n [ ]" if v == [] else f"{json.dumps(k)}: "
                                   + json.dumps(v, indent=1) for k, v in keys) + "\n}").encode()


@settings(max_examples=400, deadline=None, derandomize=True)
@given(answers(), st.booleans(), st.booleans())
def test_client_body_equals_the_full_parse(upstream: bytes, ids: bool, logprobs: bool) -> None:
    prep = _prep(ids, logprobs)
    assert chat.client_body(upstream, prep) == reference(upstream, prep)


def test_the_realistic_answer_is_cut_and_equal() -> None:
    body = chat_body({"model": "m", "max_tokens": 128, "min_tokens": 128, "return_token_ids": True, "logprobs": True,
                      "messages": [{"role": "user", "content": "lorem ipsum " * 4000}]})
    cut = chat._without_prompt_ids(body)
    assert cut is not None and len(cut) < len(body) / 3
    for ids, logprobs in ((False, False), (False, True), (True, False)):
        assert chat.client_body(body, _prep(ids, logprobs)) == reference(body, _prep(ids, logprobs))
    assert b"prompt_token_ids" not in chat.client_body(body, _prep(False, False))


def test_what_is_not_cut() -> None:
    assert chat._without_prompt_ids(b'{"choices":[{"prompt_token_ids":[1]}]}') is None  # nested
    assert chat._without_prompt_ids(b'{"prompt_token_ids":[1],"choices":[],"prompt_token_ids":[2]}') is None
    assert chat._without_prompt_ids(b'{"prompt_token_ids":[1.5],"choices":[]}') is None  # not integers
    assert chat._without_prompt_ids(b'{"x":"\\"prompt_token_ids\\":[1]","choices":[]}') is None  # in a string
    assert chat._without_prompt_ids(b'{"choices":[],"prompt_token_ids":[1, 2] }') == b'{"choices":[]}'
    assert chat._without_prompt_ids(b'{ "prompt_token_ids" : [ ] , "choices":[]}') == b'{ "choices":[]}'
