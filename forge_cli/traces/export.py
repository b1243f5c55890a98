"""Export call records as JSONL (one CallRecord object a line) or Parquet (schema from ``record.COLUMNS``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from forge_cli.traces import store
from forge_cli.traces.record import COLUMNS


def arrow_schema() -> Any:
    """The Parquet schema: JSON columns as JSON text, token ids as list<int32>, logprobs as list<float32>."""
    import pyarrow as pa

    types = {"int64": pa.int64(), "int32": pa.int32(), "string": pa.string(), "bool": pa.bool_(),
             "float64": pa.float64(), "json": pa.string(), "list<int32>": pa.list_(pa.int32()),
             "list<float>": pa.list_(pa.float32())}
    return pa.schema([pa.field(name, types[arrow]) for name, _, arrow in COLUMNS])


def export(store_path: str | Path, out: str | Path, fmt: str = "jsonl", rollout_id: str | None = None) -> int:
    """Write the store's calls (optionally one rollout's) to ``out``; returns the number written."""
    conn = store.open_store(store_path, readonly=True)
    try:
        # images stored once (blobs.py) resolved back into each request: the export is self-contained
        records = (store.resolve_record(conn, r) for r in store.iter_calls(conn, rollout_id))
        if fmt == "jsonl":
            n = 0
            with open(out, "w", encoding="utf-8") as fh:
                for rec in records:
                    fh.write(json.dumps(rec.to_dict(), ensure_ascii=False, separators=(",", ":")) + "\n")
                    n += 1
            return n
        if fmt == "parquet":
            return _parquet(records, out)
        raise ValueError(f"unknown export format {fmt!r} (jsonl, parquet)")
    finally:
        conn.close()


def _parquet(records: Any, out: str | Path, batch: int = 512) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = arrow_schema()
    json_cols = {name for name, _, arrow in COLUMNS if arrow == "json"}
    n = 0
    with pq.ParquetWriter(str(out), schema) as writer:
        rows: list[dict[str, Any]] = []
        for rec in records:
            row = rec.to_dict()
            for col in json_cols:
                row[col] = None if row[col] is None else json.dumps(row[col], ensure_ascii=False)
            rows.append(row)
            if len(rows) >= batch:
                writer.write_table(pa.Table.from_pylist(rows, schema=schema))
                n += len(rows)
                rows = []
        if rows or n == 0:
            writer.write_table(pa.Table.from_pylist(rows, schema=schema))
            n += len(rows)
    return n
