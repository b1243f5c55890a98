"""The sample builder: a finished rollout's recorded calls -> training samples (the one used by every trainer).

Rules (the contract; ``tests/train/test_samples.py`` pins each one):

* **Trainable calls.** A record trains only when its status is ``ok``, it has prompt and completion token ids, and
  it has one finite logprob per completion token. Any other record (``upstream_error``, ``client_abort``,
  ``incomplete``; no ids; a NaN/inf/missing logprob) is *skipped*: it neither starts, extends nor ends a segment,
  and none of its tokens is ever a loss token. When the harness kept such a call's answer in its history, those
  tokens reach the sample inside the next trainable call's prompt, as context (loss mask 0). So a failed call
  retried with the same prompt, or an answer with a NaN logprob, never splits a sequence and never trains.
* **Merging.** A trainable call whose prompt token ids start with the current segment's tokens (the previous
  trainable call's prompt + completion) extends that segment: the prompt's new tokens (tool results, user turns
  the harness added) are context (mask 0), its completion is sampled (mask 1, with vLLM's logprobs). Any other
  trainable call starts a new segment (compaction, sub-agents, a title call, rewritten history). Each segment's
  ``prompt_ids + response_ids`` is therefore exactly its last call's prompt + completion as vLLM returned them.
* **Length.** With ``max_seq_len`` L, a segment longer than L loses tokens from the left of its prompt (the
  context before its first loss token), never loss tokens; ``Sample.truncated`` and the stats count them. When
  even that cannot fit it (its response span from the first loss token to the end is L tokens or more: at least
  one prompt token is always kept), it is split at call boundaries into the fewest consecutive pieces, each
  holding the longest run of calls that fits and handled the same way (its prompt is everything before its first
  call's completion: earlier answers become context there). A call whose completion alone cannot fit is left
  out and makes its rollout *over-length*.
* **Rollouts.** ``infra_error`` rollouts yield nothing (``SamplePolicy.drop_group_on_infra`` drops their whole
  group: a group is the rollouts of one task in one step, ``RolloutResult.group_id``). ``timeout`` rollouts and
  over-length ones (status ``over_length``, or a call that cannot fit) are treated per ``SamplePolicy.timeout`` /
  ``over_length``: ``mask`` keeps them in their group (their reward counts for the advantages) with every loss
  mask 0; ``zero`` trains them with reward 0; ``drop`` removes them before advantages are computed. A rollout
  without a reward (not verified) counts as reward 0.
* **Recorded prefixes.** A rollout whose first calls were answered from a recording (``RolloutResult.prefix_calls``:
  ``forge rollout --replay``, ``forge branch``) keeps them as context: their answers carry no loss, and a piece
  made of them alone is no sample (they were trained, or not, in the rollout they were recorded in).
* **Reward and advantage.** All samples of a rollout share its reward and advantage; advantages are computed per
  group over the rollouts kept (``forge_cli/train/algos.py``: veRL's GRPO / RLOO outcome estimators).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from forge_cli.rollout.reader import RunRollout
from forge_cli.traces.record import CallRecord
from forge_cli.train.sample import Sample

Treatment = Literal["mask", "zero", "drop"]
TREATMENTS: tuple[Treatment, ...] = ("mask", "zero", "drop")
# an advantage estimator registered by name (forge_cli/train/algos.py: grpo, rloo, a package's), or "none"
Estimator = str
# why a call did or did not join the previous trainable call's segment
REASONS = ("first", "merged", "prefix-mismatch", "not-ok", "no-ids", "nan-logprob", "no-logprobs")
SKIPPED = frozenset({"not-ok", "no-ids", "nan-logprob", "no-logprobs"})
EPS = 1e-6


@dataclass(frozen=True)
class SamplePolicy:
    """What happens to rollouts that did not end cleanly, how long a sample may be, how advantages are computed."""

    # longest sample in tokens (trainer.max_seq_len; None: no limit), for build_batch
    max_seq_len: int | None = None
    # drop every rollout of a group in which one rollout had an infra_error (else only that rollout)
    drop_group_on_infra: bool = False
    # rollouts that ran past their time limit: mask (kept for the group, no loss), zero (reward 0), drop
    timeout: Treatment = "mask"
    # rollouts with status "over_length" or a call that cannot fit max_seq_len: mask, zero or drop
    over_length: Treatment = "mask"
    # advantage estimator per group: grpo (mean/std), rloo (leave-one-out), a registered one, none (advantage 0)
    advantage: Estimator = "grpo"
    # grpo: divide by the group's reward standard deviation (plus epsilon)
    norm_adv_by_std: bool = True
    epsilon: float = EPS

    def __post_init__(self) -> None:
        for name in ("timeout", "over_length"):
            if getattr(self, name) not in TREATMENTS:
                raise ValueError(f"SamplePolicy.{name}={getattr(self, name)!r}: use one of {', '.join(TREATMENTS)}")
        if self.max_seq_len is not None and self.max_seq_len < 2:
            raise ValueError(f"SamplePolicy.max_seq_len={self.max_seq_len}: must be at least 2")
        if self.advantage != "none":
            from forge_cli.train.algos import get_adv_estimator_fn

            try:
                get_adv_estimator_fn(self.advantage)
            except ValueError as exc:
                raise ValueError(f"SamplePolicy.advantage={self.advantage!r}: {exc} (or none)") from None


@dataclass
class RolloutStats:
    """How one rollout's calls became samples (summed over rollouts with ``add``)."""

    calls: int = 0
    # ok calls with token ids and finite logprobs
    trainable: int = 0
    # trainable calls that have a trainable predecessor in their rollout, and those of them that merged into it
    transitions: int = 0
    merged: int = 0
    # transitions whose prompt at least starts with the previous trainable call's prompt
    prompt_prefix: int = 0
    # segments from merging, and samples after length splits (pieces without any token are not emitted)
    segments: int = 0
    samples: int = 0
    split_segments: int = 0
    truncated_tokens: int = 0
    truncated_samples: int = 0
    over_length_calls: int = 0
    loss_tokens: int = 0
    # samples left out because their images cannot be trained on: an image given by URL (not inline data), or a
    # cut through the images' placeholders (truncation of a segment that holds images)
    image_samples_dropped: int = 0
    # call count per reason (REASONS)
    reasons: dict[str, int] = field(default_factory=dict)

    def add(self, other: RolloutStats) -> None:
        for name, value in asdict(other).items():
            if name == "reasons":
                for reason, n in value.items():
                    self.reasons[reason] = self.reasons.get(reason, 0) + n
            else:
                setattr(self, name, getattr(self, name) + value)

    @property
    def merge_share(self) -> float | None:
        """Share of transitions that merged (None without transitions)."""
        return self.merged / self.transitions if self.transitions else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "merge_share": self.merge_share}


@dataclass
class BuiltRollout:
    """One rollout's samples and how they were made."""

    rollout_id: str
    group_id: str
    task_id: str
    harness: str
    status: str
    step: int
    # the reward its samples carry (after ``zero``) and its advantage (set by build_batch)
    reward: float
    samples: list[Sample]
    stats: RolloutStats
    # (seq, reason) per call, in order
    decisions: list[tuple[int, str]]
    over_length: bool = False
    # the SamplePolicy treatment applied (mask, zero, mask+zero or drop), None when the rollout ended cleanly
    treatment: str | None = None
    # why it yields no samples: infra_error, infra_group, timeout, over_length (None: kept)
    dropped: str | None = None
    advantage: float = 0.0


@dataclass
class Batch:
    """The samples of a set of rollouts with the group rules applied and advantages set."""

    samples: list[Sample]
    rollouts: list[BuiltRollout]
    # the rollouts' stats summed
    totals: RolloutStats
    groups: int

    @property
    def dropped(self) -> dict[str, int]:
        """Rollouts left out, by reason."""
        out: dict[str, int] = {}
        for built in self.rollouts:
            if built.dropped:
                out[built.dropped] = out.get(built.dropped, 0) + 1
        return out

    def summary(self) -> dict[str, Any]:
        """Rollouts (kept, dropped by reason, masked, zeroed), groups, the batch's samples and loss tokens, and the
        rollouts' summed stats (``samples_built`` / ``loss_tokens_built`` include dropped and masked rollouts)."""
        kept = [b for b in self.rollouts if not b.dropped]
        totals = self.totals.to_dict()
        # what was built, before dropped rollouts were left out and masked ones lost their loss tokens
        totals["samples_built"] = totals.pop("samples")
        totals["loss_tokens_built"] = totals.pop("loss_tokens")
        return {"rollouts": len(self.rollouts), "kept": len(kept), "dropped": self.dropped, "groups": self.groups,
                "samples": len(self.samples), "loss_tokens": sum(s.loss_tokens for s in self.samples),
                "masked": sum(1 for b in kept if "mask" in (b.treatment or "")),
                "zeroed": sum(1 for b in kept if "zero" in (b.treatment or "")), **totals}

    def stats(self) -> dict[str, float]:
        """``summary`` flattened to numbers for metrics logs: ``dropped_<reason>``, ``calls_<reason>``;
        ``merge_share`` only when there were transitions."""
        out: dict[str, float] = {}
        for key, value in self.summary().items():
            if key == "dropped":
                out.update({f"dropped_{k}": float(v) for k, v in value.items()})
            elif key == "reasons":
                out.update({f"calls_{k.replace('-', '_')}": float(v) for k, v in value.items()})
            elif value is not None:
                out[key] = float(value)
        return out


# ---------------------------------------------------------------------------------------------- segmenting calls

def call_reason(call: CallRecord) -> str | None:
    """Why a record cannot train (a SKIPPED reason), or None when it is trainable."""
    if call.status != "ok":
        return "not-ok"
    if not call.prompt_token_ids or call.completion_token_ids is None:
        return "no-ids"
    logprobs = call.completion_logprobs
    if logprobs is None or len(logprobs) != len(call.completion_token_ids):
        return "no-logprobs"
    if not all(isinstance(v, int | float) and math.isfinite(v) for v in logprobs):
        return "nan-logprob"
    return None


@dataclass
class _Segment:
    tokens: list[int]
    start: int  # index of the first response token (len of the first call's prompt)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    # per trainable call: (first completion index, end index, weight version)
    calls: list[tuple[int, int, str | None]] = field(default_factory=list)
    # per trainable call: the images of its upstream request (None: one is not inline data)
    images: list[list[str] | None] = field(default_factory=list)

    def append(self, call: CallRecord, loss: bool = True) -> None:
        prompt, completion = call.prompt_token_ids or [], call.completion_token_ids or []
        context = prompt[len(self.tokens):]
        self.tokens += context
        self.mask += [0] * len(context)
        self.logprobs += [0.0] * len(context)
        begin = len(self.tokens)
        self.tokens += completion
        self.mask += [int(loss)] * len(completion)
        self.logprobs += [float(v) for v in call.completion_logprobs or []]
        self.calls.append((begin, len(self.tokens), call.weight_version))
        # what vLLM was sent: the translated request, or the client's own Chat Completions request (kept once)
        self.images.append(request_images(call.upstream_request if call.upstream_request is not None
                                          else call.request))


def request_images(request: Any) -> list[str] | None:
    """The base64 images of a Chat Completions request (what vLLM was sent), in message order; None when one is not
    inline data (a URL vLLM fetched: forge does not fetch it again for training)."""
    found: list[str] = []
    messages = request.get("messages") if isinstance(request, dict) else None
    for message in messages or []:
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else []:
            if not isinstance(part, dict) or part.get("type") != "image_url":
                continue
            url = part.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            if not isinstance(url, str) or not url.startswith("data:") or ";base64," not in url:
                return None
            found.append(url.split(";base64,", 1)[1])
    return found


def _extends(prompt: Sequence[int], history: Sequence[int]) -> bool:
    return len(prompt) >= len(history) and list(prompt[:len(history)]) == list(history)


def _pieces(seg: _Segment, max_seq_len: int | None, stats: RolloutStats) -> list[tuple[int, int, int]]:
    """(first call, last call, tokens cut from the left) per piece of a segment; counts what it cuts and drops."""
    n = len(seg.calls)
    if max_seq_len is None or len(seg.tokens) <= max_seq_len:
        return [(0, n - 1, 0)]
    out = []
    left_out = 0
    k = 0
    while k < n:
        begin = seg.calls[k][0]
        m = k - 1
        # the response span (first completion token to the last call's end) must leave one prompt token
        while m + 1 < n and seg.calls[m + 1][1] - begin <= max_seq_len - 1:
            m += 1
        if m < k:
            left_out += 1
            k += 1
            continue
        out.append((k, m, max(0, seg.calls[m][1] - max_seq_len)))
        k = m + 1
    stats.over_length_calls += left_out
    stats.split_segments += len(out) > 1 or left_out > 0
    return out


def segment_calls(calls: Sequence[CallRecord], *, max_seq_len: int | None = None, prefix_calls: int = 0
                  ) -> tuple[list[Sample], RolloutStats, list[tuple[int, str]]]:
    """A rollout's records (in ``seq`` order) -> its samples, stats and (seq, reason) per call.

    The samples carry the records' rollout id and nothing of the rollout's result yet (group, task, reward:
    ``build_samples`` sets them). Rules: the module docstring. The answers of calls with ``seq < prefix_calls``
    (answered from a recording: a replay's or a branch's prefix) stay in the sequence as context with no loss, and a
    piece made of them alone is no sample.
    """
    if max_seq_len is not None and max_seq_len < 2:
        raise ValueError(f"max_seq_len={max_seq_len}: a sample needs at least one prompt and one response token")
    stats = RolloutStats(calls=len(calls))
    decisions: list[tuple[int, str]] = []
    segments: list[_Segment] = []
    previous: CallRecord | None = None
    for call in sorted(calls, key=lambda c: c.seq):
        reason = call_reason(call)
        if reason is None:
            prompt = call.prompt_token_ids or []
            stats.trainable += 1
            if previous is None:
                reason = "first"
            else:
                stats.transitions += 1
                prev_prompt = previous.prompt_token_ids or []
                stats.prompt_prefix += _extends(prompt, prev_prompt)
                reason = "merged" if _extends(prompt, segments[-1].tokens) else "prefix-mismatch"
            if reason == "merged":
                stats.merged += 1
            else:
                segments.append(_Segment(tokens=list(prompt), start=len(prompt)))
            segments[-1].append(call, loss=call.seq >= prefix_calls)
            previous = call
        stats.reasons[reason] = stats.reasons.get(reason, 0) + 1
        decisions.append((call.seq, reason))
    stats.segments = len(segments)

    rollout_id = calls[0].rollout_id if calls else ""
    samples: list[Sample] = []
    for seg in segments:
        for first, last, cut in _pieces(seg, max_seq_len, stats):
            begin, end = seg.calls[first][0], seg.calls[last][1]
            if end == begin or not any(seg.mask[begin - seg.start:end - seg.start]):
                continue  # empty answers only, or a recorded prefix only: nothing to train on
            lo, hi = begin - seg.start, end - seg.start
            versions = list(dict.fromkeys(v for _, _, v in seg.calls[first:last + 1] if v is not None))
            # the last call's request holds the whole conversation so far: its images are the piece's
            images = seg.images[last]
            if images is None or (images and cut):
                stats.image_samples_dropped += 1
                continue
            samples.append(Sample(rollout_id=rollout_id, group_id="", task_id="", segment=len(samples),
                                  prompt_ids=seg.tokens[cut:begin], response_ids=seg.tokens[begin:end],
                                  loss_mask=seg.mask[lo:hi], rollout_logprobs=seg.logprobs[lo:hi], reward=0.0,
                                  weight_versions=versions, truncated=cut, calls=last - first + 1, images=images))
            stats.truncated_tokens += cut
            stats.truncated_samples += cut > 0
    stats.samples = len(samples)
    stats.loss_tokens = sum(s.loss_tokens for s in samples)
    return samples, stats, decisions


# ---------------------------------------------------------------------------------------------- rollouts and batches

def build_samples(rollout: RunRollout, *, max_seq_len: int | None, policy: SamplePolicy) -> BuiltRollout:
    """One finished rollout -> its samples, with the rollout-level rules applied (infra_error, timeout,
    over-length; see the module docstring). Group rules and advantages are ``build_batch``'s."""
    result = rollout.result
    samples, stats, decisions = segment_calls(rollout.calls, max_seq_len=max_seq_len,
                                              prefix_calls=result.prefix_calls)
    built = BuiltRollout(rollout_id=result.rollout_id, group_id=result.group_id or f"{result.step}:{result.task_id}",
                         task_id=result.task_id, harness=result.harness, status=str(result.status), step=result.step,
                         reward=float(result.reward or 0.0), samples=[], stats=stats, decisions=decisions,
                         over_length=result.status == "over_length" or stats.over_length_calls > 0)
    if result.status == "infra_error":
        built.dropped = "infra_error"
        return built
    # timeout and over-length may both apply: drop wins, else zero and mask both take effect
    treatments = {getattr(policy, kind): kind for kind, applies in
                  (("over_length", built.over_length), ("timeout", result.status == "timeout")) if applies}
    if "drop" in treatments:
        built.treatment, built.dropped = "drop", treatments["drop"]
        return built
    if treatments:
        built.treatment = "+".join(sorted(treatments))
    if "zero" in treatments:
        built.reward = 0.0
    masked = "mask" in treatments
    for sample in samples:
        built.samples.append(replace(
            sample, rollout_id=built.rollout_id, group_id=built.group_id, task_id=built.task_id, reward=built.reward,
            step=built.step, harness=built.harness,
            loss_mask=[0] * len(sample.loss_mask) if masked else sample.loss_mask,
            rollout_logprobs=[0.0] * len(sample.rollout_logprobs) if masked else sample.rollout_logprobs))
    return built


def build_batch(rollouts: Iterable[RunRollout], policy: SamplePolicy) -> Batch:
    """Samples of every rollout (``policy.max_seq_len``), group rules applied (``drop_group_on_infra``), advantages
    set per group over the rollouts kept; samples in input order."""
    built = [build_samples(r, max_seq_len=policy.max_seq_len, policy=policy) for r in rollouts]
    groups: dict[str, list[BuiltRollout]] = {}
    for b in built:
        groups.setdefault(b.group_id, []).append(b)
    for members in groups.values():
        if policy.drop_group_on_infra and any(b.dropped == "infra_error" for b in members):
            for b in members:
                if not b.dropped:
                    b.dropped, b.samples = "infra_group", []
    kept = [b for b in built if not b.dropped]
    if policy.advantage != "none" and kept:
        from forge_cli.train.algos import rollout_advantages

        advantages = rollout_advantages({b.rollout_id: b.reward for b in kept},
                                        {b.rollout_id: b.group_id for b in kept},
                                        policy.advantage, policy.norm_adv_by_std, policy.epsilon)
        for b in kept:
            b.advantage = advantages[b.rollout_id]
            for sample in b.samples:
                sample.advantage = b.advantage
    totals = RolloutStats()
    for b in built:
        totals.add(b.stats)
    return Batch(samples=[s for b in built for s in b.samples], rollouts=built, totals=totals, groups=len(groups))


# ---------------------------------------------------------------------------------------------- merge report

@dataclass
class MergeStats:
    """Per harness: how much of its history merges into one training sequence."""

    harness: str
    rollouts: int = 0
    stats: RolloutStats = field(default_factory=RolloutStats)

    def add(self, stats: RolloutStats) -> None:
        self.rollouts += 1
        self.stats.add(stats)

    @property
    def merge_share(self) -> float | None:
        return self.stats.merge_share

    @property
    def prompt_prefix_share(self) -> float | None:
        return self.stats.prompt_prefix / self.stats.transitions if self.stats.transitions else None

    def to_dict(self) -> dict[str, Any]:
        return {"harness": self.harness, "rollouts": self.rollouts, **self.stats.to_dict(),
                "prompt_prefix_share": self.prompt_prefix_share}


def merge_stats(built: Iterable[BuiltRollout]) -> dict[str, MergeStats]:
    """Merge figures per harness over built rollouts (dropped ones included: merging is about the harness)."""
    out: dict[str, MergeStats] = {}
    for b in built:
        out.setdefault(b.harness, MergeStats(b.harness)).add(b.stats)
    return out
