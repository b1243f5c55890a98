"""One forge rollout's samples -> the fields of veRL 0.9.1's ``AgentLoopOutput``s (pure; no veRL import).

veRL's V1 agent-loop worker (``verl/trainer/ppo/v1/agent_loop_tq.py`` ``AgentLoopWorkerTQ._agent_loop_postprocess``)
takes ``AgentLoopOutput | list[AgentLoopOutput]`` per rollout and stores one row per output under the key
``{uid}_{session}_{index}``; ``verl/trainer/ppo/v1/utils.py`` ``compute_advantage_for_multi_trajectories`` computes
GRPO on each session's last output and copies that advantage to all of its outputs. So one forge segment is one
output, in segment order:

- ``prompt_ids`` / ``response_ids``: the segment's prompt and everything after it (forge's ``Sample`` layout is
  veRL's); ``response_mask`` is forge's loss mask (1 exactly on the tokens the policy sampled);
  ``response_logprobs`` are the logprobs the rollout engine returned for them (0.0 elsewhere) — ``as_dict()``
  turns them into ``rollout_log_probs`` (rollout correction reads them).
- ``reward_score``: the verifier's reward of the rollout on every output; ``as_dict()`` puts it on the last
  response token (``rm_scores``). Setting it skips veRL's own reward function (``_compute_score``).
- ``extra_fields``: ``reward_extra_info`` (required: the V1 worker copies the last output's to the others and
  raises KeyError without it), ``min_global_steps`` / ``max_global_steps`` (the V1 trainer builds an ``int``
  array of them, so they must not be None), and forge's own: rollout id, group, task, segment index and count,
  weight versions, status, treatment, calls merged, tokens truncated.

A rollout forge drops (``BuiltRollout.dropped``: infra error, a drop treatment) converts to ``[]``: veRL's V1
worker logs "Empty output" and stores no row for it, so its group trains without it (see
``remote/verl/agent_loop.py``). A masked rollout (timeout / over-length with treatment ``mask``) keeps its reward
for the group's statistics and has an all-zero ``response_mask``: its advantage reaches no token.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # stdlib-only at run time: veRL's environment imports this module from the checkout
    from forge_cli.train.samples import BuiltRollout

# the keys of reward_extra_info, the same on every output (veRL stacks them into columns)
REWARD_EXTRA_KEYS = ("score", "forge_status")


@dataclass
class LoopOutput:
    """The fields forge fills in veRL's ``AgentLoopOutput`` (``metrics`` is ``AgentLoopMetrics``' fields)."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float]
    reward_score: float
    num_turns: int
    metrics: dict[str, float] = field(default_factory=dict)
    extra_fields: dict[str, Any] = field(default_factory=dict)
    # base64 images of a vision-language segment (veRL's multi_modal_data["images"] as PIL images)
    images: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _global_steps(versions: list[str], default: int) -> tuple[int, int]:
    """(min, max) of the weight versions when they are veRL's global steps (integers), else (default, default)."""
    steps = [int(v) for v in versions if v.lstrip("-").isdigit()]
    if not steps or len(steps) != len(versions):
        return default, default
    return min(steps), max(steps)


def convert(built: BuiltRollout, *, global_steps: int, metrics: dict[str, float] | None = None) -> list[LoopOutput]:
    """One built rollout (``samples.build_samples``) -> one output per segment, in order; ``[]`` when dropped.

    ``global_steps`` is veRL's step of the dataset row (the weight version when the records carry none that is an
    integer); ``metrics`` goes to every output (``AgentLoopMetrics`` fields, e.g. ``generate_sequences`` seconds).
    """
    if built.dropped is not None:
        return []
    samples = [s for s in built.samples if s.response_ids]
    count = len(samples)
    # the turns of the whole rollout: one assistant turn per call plus the context between them
    num_turns = sum(2 * s.calls for s in samples)
    outputs = []
    for index, sample in enumerate(samples):
        low, high = _global_steps(sample.weight_versions, global_steps)
        outputs.append(LoopOutput(
            prompt_ids=list(sample.prompt_ids), response_ids=list(sample.response_ids),
            response_mask=list(sample.loss_mask), response_logprobs=[float(v) for v in sample.rollout_logprobs],
            reward_score=float(built.reward), num_turns=num_turns, metrics=dict(metrics or {}),
            extra_fields={
                "reward_extra_info": {"score": float(built.reward), "forge_status": built.status},
                "min_global_steps": low, "max_global_steps": high,
                "forge_rollout_id": built.rollout_id, "forge_group_id": built.group_id,
                "forge_task_id": built.task_id, "forge_segment": index, "forge_segments": count,
                "forge_weight_versions": list(sample.weight_versions), "forge_status": built.status,
                "forge_treatment": built.treatment, "forge_calls": sample.calls,
                "forge_truncated": sample.truncated,
            }, images=list(sample.images)))
    return outputs


def to_agent_loop_outputs(outputs: list[LoopOutput]) -> list[Any]:
    """veRL's real ``AgentLoopOutput``s (only where veRL is importable: its environment)."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

    return [AgentLoopOutput(prompt_ids=o.prompt_ids, response_ids=o.response_ids, response_mask=o.response_mask,
                            response_logprobs=o.response_logprobs, reward_score=o.reward_score,
                            num_turns=o.num_turns, metrics=AgentLoopMetrics(**o.metrics),
                            multi_modal_data={"images": decode_images(o.images)} if o.images else None,
                            extra_fields=dict(o.extra_fields))
            for o in outputs]


def decode_images(images: list[str]) -> list[Any]:
    """Base64 image files as RGB PIL images (what veRL's processor takes)."""
    import base64
    import io

    from PIL import Image

    return [Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB") for data in images]
