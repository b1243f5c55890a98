"""SFT samples in the student's tokens, from recorded calls whose answers came from a teacher.

A teacher endpoint (any OpenAI-compatible API) returns no token ids, so the samples of a teacher's run are built
from the text the proxy recorded: each call's request **in the form the proxy forwarded it** (``upstream_request``,
else ``request``: system, tools, messages) is rendered with the student's chat template, exactly as the student's
vLLM renders it (tool-call ``arguments`` given as JSON strings are parsed into objects first, as vLLM does; a test
pins the ids to the ``prompt_token_ids`` vLLM returns for the same request), and the teacher's answer becomes the
assistant turn the student must produce, in the student's own tool-call format (the template's: hermes
``<tool_call>`` for forge's default model), up to and including its end-of-turn token.

Consecutive calls of a rollout whose rendered prompt extends the sequence so far (prompt + answer of the call
before) merge into one sequence with several loss spans; any other call starts a new sequence. The loss mask is 1
on exactly the assistant tokens, 0 on everything the harness and the environment wrote.

Every wire format is rendered the same way: the proxy forwards a Responses (Codex), Anthropic Messages (Claude Code)
or Gemini call upstream as Chat Completions, and the record's answer is turned back into the Chat Completions answer
it was translated from (``forge_cli.proxy.wire.exchange``). A record that cannot be read so (a failed call, an
answer its format cannot invert) is refused with a message saying why (``SftError``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from forge_cli.errors import UserError
from forge_cli.proxy.wire.exchange import NoExchange, chat_answer, chat_request
from forge_cli.rollout.reader import read_run
from forge_cli.traces.record import CallRecord
from forge_cli.train.sample import Sample
from forge_cli.train.vllm_render import as_vllm_renders


class SftError(UserError):
    """A record that cannot become an SFT sample (exit 2)."""

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message, fix=fix, exit_code=2)


class ChatTokenizer(Protocol):
    """What rendering needs of a tokenizer: ``transformers``' ``apply_chat_template`` and ``__call__``."""

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...

    def __call__(self, text: str, **kwargs: Any) -> Any: ...


def load_student_tokenizer(model_dir: Path) -> ChatTokenizer:
    """The student's tokenizer with its chat template (``chat_template.jinja`` beside the weights wins, as vLLM is
    launched with it). Needs ``transformers`` (forge's ``train`` extra)."""
    try:
        from transformers import AutoTokenizer  # type: ignore[import-not-found,unused-ignore]
    except ImportError as exc:
        raise UserError("rendering SFT samples needs transformers", fix="scripts/setup.sh core (forge's train extra)",
                        exit_code=1) from exc
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    template = model_dir / "chat_template.jinja"
    if template.is_file():
        tokenizer.chat_template = template.read_text(encoding="utf-8")
    if not getattr(tokenizer, "chat_template", None):
        raise SftError(f"{model_dir}: the student's tokenizer has no chat template")
    return tokenizer  # type: ignore[no-any-return,unused-ignore]


@dataclass
class SftSequence:
    """One training sequence: ``input_ids`` with ``loss_mask`` 1 on the assistant tokens the student must produce."""

    rollout_id: str
    task_id: str
    reward: float | None
    input_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    calls: int = 0  # calls merged into it (= loss spans)

    @property
    def loss_tokens(self) -> int:
        return sum(self.loss_mask)

    def to_row(self) -> dict[str, Any]:
        return {"rollout_id": self.rollout_id, "task_id": self.task_id, "reward": self.reward,
                "input_ids": self.input_ids, "loss_mask": self.loss_mask, "calls": self.calls,
                "loss_tokens": self.loss_tokens}


def _chat_request(call: CallRecord) -> dict[str, Any]:
    body = chat_request(call)
    if not isinstance(body.get("messages"), list):
        raise SftError(f"call {call.seq} of rollout {call.rollout_id}: its forwarded request has no messages")
    return body


def _answer(call: CallRecord) -> dict[str, Any]:
    try:
        response = chat_answer(call)
    except NoExchange as exc:
        raise SftError(f"call {call.seq} of rollout {call.rollout_id} ({call.wire_format}) cannot become an SFT "
                       f"sample: {exc}") from None
    choices = response.get("choices")
    message = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
    if not isinstance(message, dict):
        raise SftError(f"call {call.seq} of rollout {call.rollout_id}: its response holds no assistant message")
    answer = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        answer["tool_calls"] = message["tool_calls"]
    return answer


def render_call(tokenizer: ChatTokenizer, call: CallRecord) -> tuple[list[int], list[int]]:
    """(prompt ids, answer ids) of one call in the student's tokens: the prompt as the student's vLLM renders the
    forwarded request, the answer as the assistant turn up to and including its end-of-turn token."""
    body = _chat_request(call)
    where = f"call {call.seq} of rollout {call.rollout_id}"
    template = str(getattr(tokenizer, "chat_template", "") or "")
    messages, tools = as_vllm_renders(body["messages"], template, where), body.get("tools") or None
    reply = as_vllm_renders([_answer(call)], template, where)
    prompt = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    full = tokenizer.apply_chat_template([*messages, *reply], tools=tools, add_generation_prompt=False,
                                         tokenize=False)
    if not isinstance(prompt, str) or not isinstance(full, str) or not full.startswith(prompt):
        raise SftError(f"call {call.seq} of rollout {call.rollout_id}: the student's chat template does not render "
                       f"the answer as a continuation of the prompt")
    answer = full[len(prompt):].rstrip("\n")
    return (list(tokenizer(prompt, add_special_tokens=False)["input_ids"]),
            list(tokenizer(answer, add_special_tokens=False)["input_ids"]))


def sft_sequences(rollout_id: str, task_id: str, reward: float | None, calls: Iterable[CallRecord],
                  tokenizer: ChatTokenizer) -> list[SftSequence]:
    """The rollout's answered calls (status ok) as sequences, consecutive extending calls merged."""
    out: list[SftSequence] = []
    current: SftSequence | None = None
    for call in sorted(calls, key=lambda c: c.seq):
        if call.status != "ok":
            continue
        prompt, answer = render_call(tokenizer, call)
        if current is not None and prompt[:len(current.input_ids)] == current.input_ids:
            new = prompt[len(current.input_ids):]
        else:
            current = SftSequence(rollout_id, task_id, reward)
            out.append(current)
            new = prompt
        current.input_ids += new + answer
        current.loss_mask += [0] * len(new) + [1] * len(answer)
        current.calls += 1
    return out


def export_sft(run_dir: Path, out: Path, model_dir: Path, min_reward: float) -> dict[str, Any]:
    """Write the run's rollouts whose reward is at least ``min_reward`` (rejection sampling) as SFT sequences in
    the tokens of the student in ``model_dir``, one Parquet row per sequence (``SftSequence.to_row``)."""
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
    import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]


    tokenizer = load_student_tokenizer(model_dir)
    rows: list[dict[str, Any]] = []
    rollouts = kept = 0
    for rollout in read_run(run_dir):
        rollouts += 1
        reward = rollout.result.reward
        if reward is None or reward < min_reward or rollout.result.status != "ok":
            continue
        kept += 1
        rows += [s.to_row() for s in sft_sequences(rollout.result.rollout_id, rollout.result.task_id, reward,
                                                   rollout.calls, tokenizer)]
    out.parent.mkdir(parents=True, exist_ok=True)
    schema = pa.schema([("rollout_id", pa.string()), ("task_id", pa.string()), ("reward", pa.float64()),
                        ("input_ids", pa.list_(pa.int32())), ("loss_mask", pa.list_(pa.int8())),
                        ("calls", pa.int32()), ("loss_tokens", pa.int64())])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), out)
    return {"out": str(out), "student": str(model_dir), "min_reward": min_reward, "rollouts": rollouts,
            "kept": kept, "sequences": len(rows), "calls": sum(r["calls"] for r in rows),
            "loss_tokens": sum(r["loss_tokens"] for r in rows), "tokens": sum(len(r["input_ids"]) for r in rows)}


def as_samples(sequences: Iterable[SftSequence]) -> list[Any]:
    """The sequences as the trainers' ``Sample``: the context before the first loss token as the prompt, the rest
    as the response with its loss mask (each sequence its own group; no rollout logprobs: a teacher's tokens were
    never sampled by the student)."""

    out = []
    for n, seq in enumerate(sequences):
        first = seq.loss_mask.index(1) if 1 in seq.loss_mask else len(seq.input_ids)
        response = seq.input_ids[first:]
        out.append(Sample(rollout_id=seq.rollout_id, group_id=f"sft-{n}", task_id=seq.task_id, segment=0,
                          prompt_ids=seq.input_ids[:first], response_ids=response, loss_mask=seq.loss_mask[first:],
                          rollout_logprobs=[0.0] * len(response), reward=seq.reward or 0.0, calls=seq.calls,
                          harness="teacher"))
    return out


def nll(trainer: Any, samples: list[Any], train: bool) -> dict[str, float]:
    """Token-mean negative log-likelihood of ``samples``' loss tokens under ``trainer``'s model (a ``LocalTrainer``);
    with ``train``, one AdamW step on it (micro-batches of ``trainer.micro_batch_tokens`` accumulated so that the
    gradient is that of the whole batch's token mean, clipped to ``trainer.max_grad_norm``)."""
    import torch

    from forge_cli.train.local import pack

    config = trainer.trainer
    total = sum(s.loss_tokens for s in samples)
    if total == 0:
        raise SftError("no loss tokens in the SFT batch: every sequence is context only")
    loss_sum = 0.0
    grad_norm = 0.0
    if train:
        trainer.optimizer.zero_grad(set_to_none=True)
    with torch.set_grad_enabled(train):
        for batch in pack(samples, config.micro_batch_tokens, share=trainer.sharing(grad=train)):
            logprobs, mask = trainer.logprobs(batch)
            loss = -(logprobs * mask).sum() / total
            if train:
                loss.backward()
            loss_sum += float(loss.detach())
    if train:
        params = [p for p in trainer.model.parameters() if p.requires_grad]
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm))
        trainer.optimizer.step()
        trainer.steps += 1
    return {"nll": loss_sum, "loss_tokens": float(total), "grad_norm": grad_norm}
