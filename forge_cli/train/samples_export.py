"""Built samples out of forge: a Parquet file or a Hugging Face ``datasets`` directory (``forge samples export``).

One row per sample (segment), in the order ``build_batch`` returns them. Columns (``COLUMNS``): the rollout and
segment ids, group, task, harness, step, the rollout's status, reward and advantage, ``prompt_ids``,
``response_ids``, ``loss_mask`` (1 = sampled by the policy) and ``rollout_logprobs`` parallel to
``response_ids``, the segment's weight versions, tokens truncated from the left, calls merged, and the decoded
``prompt_text`` / ``response_text`` (special tokens kept, so the chat markup is visible; null when no tokenizer
was found). The token ids are the training data: the text is only for reading, never re-tokenize it.

The ``datasets`` directory is written with pyarrow alone in the layout ``datasets.Dataset.save_to_disk`` writes
and ``datasets.load_from_disk`` reads: ``data-00000-of-00001.arrow`` (Arrow IPC stream), ``state.json`` and
``dataset_info.json`` (features left for ``datasets`` to read from the Arrow schema, which every version does).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from forge_cli.errors import UserError
from forge_cli.serve.tokenizer import Decode
from forge_cli.train.samples import Batch

FORMATS = ("parquet", "hf")
ARROW_FILE = "data-00000-of-00001.arrow"


def _schema() -> Any:
    import pyarrow as pa

    return pa.schema([
        ("rollout_id", pa.string()), ("segment", pa.int32()), ("group_id", pa.string()), ("task_id", pa.string()),
        ("harness", pa.string()), ("step", pa.int32()), ("status", pa.string()), ("reward", pa.float64()),
        ("advantage", pa.float64()), ("prompt_ids", pa.list_(pa.int32())), ("response_ids", pa.list_(pa.int32())),
        ("loss_mask", pa.list_(pa.int8())), ("rollout_logprobs", pa.list_(pa.float64())),
        ("weight_versions", pa.list_(pa.string())), ("truncated", pa.int32()), ("calls", pa.int32()),
        ("prompt_text", pa.string()), ("response_text", pa.string()),
    ])


COLUMNS = ("rollout_id", "segment", "group_id", "task_id", "harness", "step", "status", "reward", "advantage",
           "prompt_ids", "response_ids", "loss_mask", "rollout_logprobs", "weight_versions", "truncated", "calls",
           "prompt_text", "response_text")


def samples_table(batch: Batch, decode: Decode | None) -> Any:
    """The batch's samples as a pyarrow Table (``COLUMNS``)."""
    import pyarrow as pa

    status = {b.rollout_id: b.status for b in batch.rollouts}
    rows: dict[str, list[Any]] = {name: [] for name in COLUMNS}
    for s in batch.samples:
        values = {"rollout_id": s.rollout_id, "segment": s.segment, "group_id": s.group_id, "task_id": s.task_id,
                  "harness": s.harness, "step": s.step, "status": status.get(s.rollout_id), "reward": s.reward,
                  "advantage": s.advantage, "prompt_ids": s.prompt_ids, "response_ids": s.response_ids,
                  "loss_mask": s.loss_mask, "rollout_logprobs": s.rollout_logprobs,
                  "weight_versions": s.weight_versions, "truncated": s.truncated, "calls": s.calls,
                  "prompt_text": decode(s.prompt_ids) if decode else None,
                  "response_text": decode(s.response_ids) if decode else None}
        for name in COLUMNS:
            rows[name].append(values[name])
    return pa.table(rows, schema=_schema())


def write_parquet(table: Any, out: Path) -> None:
    import pyarrow.parquet as pq

    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, out)


def write_hf_dataset(table: Any, out: Path) -> None:
    """``table`` as a directory ``datasets.load_from_disk(out)`` loads (one shard)."""
    import pyarrow as pa

    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} exists and is not an empty directory", fix="choose a new output directory",
                        exit_code=2)
    out.mkdir(parents=True, exist_ok=True)
    with pa.OSFile(str(out / ARROW_FILE), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    state: dict[str, Any] = {"_data_files": [{"filename": ARROW_FILE}], "_fingerprint": secrets.token_hex(8),
             "_format_columns": None, "_format_kwargs": {}, "_format_type": None, "_output_all_columns": False,
             "_split": None}
    info = {"citation": "", "description": "forge training samples (forge samples export)", "homepage": "",
            "license": ""}
    (out / "state.json").write_text(json.dumps(state, indent=2) + "\n")
    (out / "dataset_info.json").write_text(json.dumps(info, indent=2) + "\n")


def write_samples(batch: Batch, out: Path, fmt: str, decode: Decode | None) -> int:
    """Write the batch's samples to ``out`` as ``fmt`` (parquet | hf); returns the number of rows."""
    if fmt not in FORMATS:
        raise UserError(f"unknown samples format {fmt!r}", fix="use --format parquet or --format hf", exit_code=2)
    table = samples_table(batch, decode)
    if fmt == "parquet":
        write_parquet(table, out)
    else:
        write_hf_dataset(table, out)
    return int(table.num_rows)


def read_samples(path: Path) -> list[dict[str, Any]]:
    """Rows back from either format (for checks and tests)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.is_dir():
        with pa.memory_map(str(path / ARROW_FILE)) as source:
            table = pa.ipc.open_stream(source).read_all()
    else:
        table = pq.read_table(path)
    rows: Sequence[dict[str, Any]] = table.to_pylist()
    return list(rows)
