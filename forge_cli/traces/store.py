"""The trace store: one SQLite file per proxy, WAL mode, ``calls`` and ``rollouts`` tables."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from forge_cli.traces.blobs import refs, resolve
from forge_cli.traces.record import COLUMNS, CallRecord

_CALLS = "CREATE TABLE IF NOT EXISTS calls (" + ", ".join(f"{n} {t}" for n, t, _ in COLUMNS) + ")"
_ROLLOUTS = """CREATE TABLE IF NOT EXISTS rollouts (
    rollout_id TEXT PRIMARY KEY, task TEXT, group_id TEXT, harness TEXT, status TEXT,
    created REAL, finished REAL, meta TEXT)"""
_BLOBS = "CREATE TABLE IF NOT EXISTS blobs (sha256 TEXT PRIMARY KEY, media_type TEXT, data BLOB NOT NULL)"
_INSERT = "INSERT INTO calls (" + ", ".join(n for n, _, _ in COLUMNS[1:]) + ") VALUES (" + \
    ", ".join("?" for _ in COLUMNS[1:]) + ")"
CALL_FIELDS = tuple(n for n, _, _ in COLUMNS[1:])


def open_store(path: str | Path, readonly: bool = False) -> sqlite3.Connection:
    """Open (creating when writable) the store; WAL so readers never block the writer."""
    path = Path(path)
    if readonly:
        if not path.exists():
            raise FileNotFoundError(path)
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30, check_same_thread=False)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, timeout=30, check_same_thread=False)
        conn.execute("PRAGMA page_size=32768")  # large request bodies: fewer overflow pages (new files only)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        # checkpoint (copy WAL pages into the database, with an fsync) every ~64 MB instead of every 4 MB
        conn.execute("PRAGMA wal_autocheckpoint=2048")
        conn.execute(_CALLS)
        conn.execute(_ROLLOUTS)
        conn.execute(_BLOBS)
        conn.execute("CREATE INDEX IF NOT EXISTS calls_rollout ON calls (rollout_id, seq)")
        conn.commit()
    conn.execute("PRAGMA busy_timeout=30000")
    conn.row_factory = sqlite3.Row
    return conn


def insert_calls(conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
    """Insert rows already in ``CALL_FIELDS`` order (JSON columns as text); the caller commits."""
    conn.executemany(_INSERT, rows)


def insert_blobs(conn: sqlite3.Connection, blobs: dict[str, tuple[str, bytes]]) -> None:
    """Images taken out of records (``blobs.extract``), each kept once; the caller commits."""
    conn.executemany("INSERT OR IGNORE INTO blobs (sha256, media_type, data) VALUES (?, ?, ?)",
                     [(digest, mime, data) for digest, (mime, data) in blobs.items()])


def row_blob_refs(rows: list[tuple[Any, ...]]) -> set[str]:
    """The blobs raw ``calls`` rows (``CALL_FIELDS`` order) reference."""

    columns = [CALL_FIELDS.index("request"), CALL_FIELDS.index("upstream_request")]
    return {d for row in rows for i in columns for d in refs(row[i] if isinstance(row[i], str) else None)}


def get_blob(conn: sqlite3.Connection, digest: str) -> tuple[str, bytes] | None:
    """(media type, content) of a stored blob, or None."""
    try:
        row = conn.execute("SELECT media_type, data FROM blobs WHERE sha256 = ?", (digest,)).fetchone()
    except sqlite3.OperationalError:  # a store written before blobs existed
        return None
    return (str(row[0]), bytes(row[1])) if row is not None else None


def resolve_record(conn: sqlite3.Connection, record: CallRecord) -> CallRecord:
    """The record with its requests' image references replaced by the images (as the client sent them)."""

    def lookup(digest: str) -> bytes | None:
        found = get_blob(conn, digest)
        return found[1] if found is not None else None

    record.request = resolve(record.request, lookup)
    record.upstream_request = resolve(record.upstream_request, lookup)
    return record


def call_rows(conn: sqlite3.Connection, rollout_id: str, after: int = 0, limit: int = 64
              ) -> tuple[list[tuple[Any, ...]], int | None]:
    """A page of the rollout's rows exactly as stored (``CALL_FIELDS`` order, JSON columns as text) after row id
    ``after``, and the cursor of the next page (None at the end)."""
    fetched = conn.execute("SELECT id, " + ", ".join(CALL_FIELDS) + " FROM calls WHERE rollout_id = ? AND id > ? "
                           "ORDER BY id LIMIT ?", (rollout_id, after, limit + 1)).fetchall()
    page = fetched[:limit]
    rows = [tuple(row)[1:] for row in page]
    return rows, (int(page[-1][0]) if len(fetched) > limit else None)


def replace_calls(conn: sqlite3.Connection, rollout_id: str, rows: list[tuple[Any, ...]]) -> None:
    """The rollout's rows replaced by ``rows`` (``CALL_FIELDS`` order; a copy pulled again stays one copy); the
    caller commits."""
    conn.execute("DELETE FROM calls WHERE rollout_id = ?", (rollout_id,))
    insert_calls(conn, rows)


def upsert_rollout(conn: sqlite3.Connection, info: dict[str, Any]) -> None:
    """Create or update a rollout's metadata row (fields left out keep their value)."""
    conn.execute("INSERT OR IGNORE INTO rollouts (rollout_id, created) VALUES (?, ?)",
                 (info["rollout_id"], info.get("created")))
    for key in ("task", "group_id", "harness", "status", "finished", "meta"):
        if key in info:
            conn.execute(f"UPDATE rollouts SET {key} = ? WHERE rollout_id = ?", (info[key], info["rollout_id"]))


def list_rollouts(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """Every rollout seen (registered or with calls), with call counts and token totals."""
    rows = conn.execute("""
        SELECT r.rollout_id AS rollout_id, r.task, r.group_id, r.harness, r.status, r.created, r.finished,
               COUNT(c.id) AS calls, COALESCE(SUM(c.prompt_tokens), 0) AS prompt_tokens,
               COALESCE(SUM(c.completion_tokens), 0) AS completion_tokens,
               SUM(c.status != 'ok') AS failed_calls, MIN(c.t_start) AS first_call, MAX(c.t_end) AS last_call
        FROM (SELECT rollout_id FROM rollouts UNION SELECT DISTINCT rollout_id FROM calls) ids
        LEFT JOIN rollouts r ON r.rollout_id = ids.rollout_id
        LEFT JOIN calls c ON c.rollout_id = ids.rollout_id
        GROUP BY ids.rollout_id ORDER BY COALESCE(r.created, MIN(c.t_start))""").fetchall()
    out = []
    for row in rows:
        item = dict(row)
        item["failed_calls"] = item["failed_calls"] or 0
        out.append(item)
    return out


def iter_calls(conn: sqlite3.Connection, rollout_id: str | None = None) -> Iterator[CallRecord]:
    """Calls in store order, optionally of one rollout (then by sequence number)."""
    if rollout_id is None:
        cursor = conn.execute("SELECT * FROM calls ORDER BY id")
    else:
        cursor = conn.execute("SELECT * FROM calls WHERE rollout_id = ? ORDER BY seq, id", (rollout_id,))
    for row in cursor:
        yield CallRecord.from_row(dict(row))


def count_calls(conn: sqlite3.Connection) -> int:
    """Number of call rows."""
    return int(conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0])
