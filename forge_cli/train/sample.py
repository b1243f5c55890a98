"""The training sample: what every trainer backend (forge's local trainer, veRL) receives for one segment.

A finished rollout's recorded calls become one or more segments (``forge_cli/train/samples.py`` builds them): a
call whose prompt token ids start with the previous call's prompt + completion ids extends the same sequence (the
tokens in between — tool results, user turns the harness added — are context with loss mask 0); any other call
starts a new segment. Loss is only on tokens the policy sampled, and every sampled token keeps the logprob the
rollout engine returned for it. All segments of a rollout share its reward and its advantage.

Layout of one segment: ``prompt_ids`` is the context before the first sampled token (the first call's prompt);
``response_ids`` is everything after it (sampled tokens and in-between context, in order); ``loss_mask`` and
``rollout_logprobs`` run parallel to ``response_ids`` (mask 1 = sampled by the policy; logprob 0.0 where the mask
is 0).

A call whose request carries images (screenshots) gives its segment those images (``images``): the prompt token ids
vLLM recorded already hold its image placeholders, and the trainer feeds the images beside them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Sample:
    rollout_id: str
    # the rollouts of one task in one batch (a GRPO group)
    group_id: str
    task_id: str
    # index of this segment among its rollout's segments
    segment: int
    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    rollout_logprobs: list[float]
    # the rollout's verifier reward (shared by its segments) and, once computed, its advantage
    reward: float
    advantage: float = 0.0
    # training step (batch) the rollout ran in, and the weight version(s) of the calls in this segment
    step: int = 0
    weight_versions: list[str] = field(default_factory=list)
    # tokens cut from the left of the prompt to fit trainer.max_seq_len (never loss tokens)
    truncated: int = 0
    # number of calls merged into this segment
    calls: int = 1
    harness: str = ""
    # vision-language samples: the images the token ids hold placeholders for, in order (base64 of the file as the
    # harness sent it; the trainer's image processor turns them into pixel values, veRL gets them as
    # multi_modal_data); empty for text
    images: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not (len(self.response_ids) == len(self.loss_mask) == len(self.rollout_logprobs)):
            raise ValueError(f"sample {self.rollout_id}/{self.segment}: response_ids, loss_mask and rollout_logprobs "
                             f"differ in length ({len(self.response_ids)}, {len(self.loss_mask)}, "
                             f"{len(self.rollout_logprobs)})")

    @property
    def input_ids(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    @property
    def loss_tokens(self) -> int:
        return sum(self.loss_mask)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
