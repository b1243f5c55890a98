"""A replayed call's prompt against the recorded one, token for token.

The prompts are the token ids the policy server renders for the request (its own chat template, tools
included). They must be equal; the only differences excused are inside text that the harness's
``replay_volatile`` patterns match (ids and timestamps a harness puts into its prompts, documented in its
config): both prompts are decoded, every match is replaced by one placeholder, and the two texts must then be
equal. The tokens that differed there are reported as masked.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Decode = Callable[[list[int]], str]
EXCERPT_TOKENS = 24


@dataclass(frozen=True, slots=True)
class Comparison:
    """How a live prompt compares with the recorded one."""

    equal: bool  # identical, or different only inside declared volatile text
    tokens: int  # tokens in the live prompt
    masked: int = 0  # live tokens that differed inside volatile text (0 when identical)
    at: int | None = None  # first token index where the prompts differ (None: identical)
    recorded: str = ""  # text around the first difference, as recorded ...
    live: str = ""  # ... and as it is now

    def describe(self) -> str:
        """One line: where the prompts part, with the text around it."""
        if self.at is None:
            return "identical"
        return (f"the prompt differs from token {self.at} of {self.tokens}: recorded {self.recorded!r}, "
                f"now {self.live!r}")


def _first_difference(a: Sequence[int], b: Sequence[int]) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def _masked(text: str, volatile: Sequence[re.Pattern[str]]) -> str:
    for pattern in volatile:
        text = pattern.sub("\x00", text)
    return text


def compare(recorded: Sequence[int], live: Sequence[int], decode: Decode | None,
            volatile: Sequence[re.Pattern[str]] = ()) -> Comparison:
    """``live`` against ``recorded`` (see the module docstring); ``decode`` turns ids into text (None: no text, so
    nothing can be excused and the excerpts stay empty)."""
    if list(recorded) == list(live):
        return Comparison(equal=True, tokens=len(live))
    at = _first_difference(recorded, live)
    lo = max(0, at - EXCERPT_TOKENS // 2)
    excerpt_r = decode(list(recorded[lo:at + EXCERPT_TOKENS // 2])) if decode else ""
    excerpt_l = decode(list(live[lo:at + EXCERPT_TOKENS // 2])) if decode else ""
    if decode is None or not volatile:
        return Comparison(equal=False, tokens=len(live), at=at, recorded=excerpt_r, live=excerpt_l)
    if _masked(decode(list(recorded)), volatile) != _masked(decode(list(live)), volatile):
        return Comparison(equal=False, tokens=len(live), at=at, recorded=excerpt_r, live=excerpt_l)
    matcher = difflib.SequenceMatcher(None, list(recorded), list(live), autojunk=False)
    masked = sum(j2 - j1 for tag, _, _, j1, j2 in matcher.get_opcodes() if tag != "equal")
    return Comparison(equal=True, tokens=len(live), masked=masked, at=at, recorded=excerpt_r, live=excerpt_l)


def patterns(sources: Sequence[str]) -> list[re.Pattern[str]]:
    """The harness's ``replay_volatile`` expressions compiled (ValueError naming a bad one)."""
    out = []
    for source in sources:
        try:
            out.append(re.compile(source))
        except re.error as exc:
            raise ValueError(f"harness.replay_volatile: {source!r} is not a regular expression: {exc}") from None
    return out
