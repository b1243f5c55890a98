"""Shared prefixes computed once (``trainer.share_prefix``).

A harness's samples share most of their tokens: pi's system prompt and tool list are ~1,450 of the ~1,550 tokens of
a one-call SFT sequence, a group's rollouts share their whole first prompt, and a rollout's segments share their
history. Run row by row, a micro-batch of B such rows computes that prefix B times. Here the micro-batch's longest
common prefix goes through the model once (batch 1), its key/value cache is repeated B times
(``DynamicCache.batch_repeat_interleave``: a differentiable copy, so the backward pass sums the rows' gradients
into the one prefix computation) and only each row's own suffix is computed on top of it. The logprobs and the
gradients are those of the unshared computation up to float rounding
(``tests/train/test_shared_prefix.py``); the work falls from B x (prefix + suffix) to prefix + B x suffix tokens.

``pack`` counts a micro-batch's size that way (the common prefix once, then rows x longest suffix), so more rows
share one prefix within ``trainer.micro_batch_tokens``. Not used for rows with images, and not in a backward pass
with ``trainer.gradient_checkpointing`` (its recomputation would run the prefix's cache update twice).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

# below this many shared tokens the second forward call costs more than it saves
MIN_SHARED = 64


class HasIds(Protocol):
    @property
    def input_ids(self) -> list[int]: ...

    @property
    def prompt_ids(self) -> list[int]: ...


def common_prefix(a: Sequence[int], b: Sequence[int], limit: int | None = None) -> int:
    """Length of the longest common prefix of ``a`` and ``b`` (at most ``limit``)."""
    n = min(len(a), len(b)) if limit is None else min(len(a), len(b), limit)
    i = 0
    # compare in chunks first: a Python loop over 1,500 ids per pair is the slow part of packing
    step = 256
    while i + step <= n and a[i:i + step] == b[i:i + step]:
        i += step
    while i < n and a[i] == b[i]:
        i += 1
    return i


def shared_length(rows: Sequence[HasIds]) -> int:
    """How many leading tokens every row of ``rows`` has in common and can take from one computation: the common
    prefix of their ``input_ids``, short of each row's last prompt token (whose logits predict its first response
    token, so it belongs to the row's own pass); 0 for a single row or a prefix under ``MIN_SHARED``."""
    if len(rows) < 2:
        return 0
    limit = min(len(r.prompt_ids) for r in rows) - 1
    first = rows[0].input_ids
    shared = limit
    for row in rows[1:]:
        shared = common_prefix(first, row.input_ids, shared)
        if shared < MIN_SHARED:
            return 0
    return shared if shared >= MIN_SHARED else 0


def micro_batch_size(rows: Sequence[HasIds], share: bool) -> int:
    """Tokens a micro-batch of ``rows`` computes: rows x longest row, or with ``share`` its shared prefix once plus
    rows x longest suffix."""
    longest = max(len(r.input_ids) for r in rows)
    shared = shared_length(rows) if share else 0
    return shared + len(rows) * (longest - shared)
