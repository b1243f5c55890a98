"""``forge traces ls | show | export``: read a capture proxy's trace store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from forge_cli.errors import UserError

app = typer.Typer(help="Inspect and export recorded model calls (CallRecords).", no_args_is_help=True)
StoreOpt = typer.Option(None, "--store", "-s", help="Trace store (default: the newest under $FORGE_HOME/proxy/).")


def _store(path: Path | None) -> Path:
    if path is not None:
        if not path.is_file():
            raise UserError(f"no trace store at {path}" + (" (a directory)" if path.is_dir() else ""),
                            fix="pass the --store path `forge proxy` printed", exit_code=2)
        return path
    from forge_cli.paths import forge_home

    found = sorted((forge_home() / "proxy").glob("*/traces.sqlite"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise UserError("no trace store found under $FORGE_HOME/proxy", fix="pass --store PATH", exit_code=2)
    return found[-1]


def _conn(path: Path | None):  # type: ignore[no-untyped-def]
    import sqlite3

    from forge_cli.traces import store

    found = _store(path)
    try:
        conn = store.open_store(found, readonly=True)
        conn.execute("SELECT 1 FROM calls LIMIT 1").fetchall()
    except sqlite3.Error as exc:
        raise UserError(f"{found} is not a forge trace store ({exc})", fix="pass the --store path `forge proxy` "
                        "printed", exit_code=2) from None
    return conn


@app.command("ls")
def ls(store: Path | None = StoreOpt, as_json: bool = typer.Option(False, "--json", help="Machine-readable.")) -> None:
    """One line per rollout: calls, failed calls, tokens."""
    from forge_cli.traces import store as st

    conn = _conn(store)
    rows = st.list_rollouts(conn)
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    typer.echo(f"{'rollout':<28} {'status':<10} {'calls':>5} {'failed':>6} {'prompt':>8} {'completion':>10}  task")
    for r in rows:
        typer.echo(f"{r['rollout_id']:<28} {r['status'] or '-':<10} {r['calls']:>5} {r['failed_calls']:>6} "
                   f"{r['prompt_tokens']:>8} {r['completion_tokens']:>10}  {r['task'] or ''}")


@app.command("show")
def show(rollout: Annotated[str, typer.Argument(help="Rollout id.")], store: Path | None = StoreOpt,
         as_json: bool = typer.Option(False, "--json", help="Full records as JSON.")) -> None:
    """The calls of one rollout, in order."""
    from forge_cli.traces import store as st

    conn = _conn(store)
    # images the writer stored once (forge_cli/traces/blobs.py) back into each request
    records = [st.resolve_record(conn, r) for r in st.iter_calls(conn, rollout)]
    if not records:
        raise UserError(f"no calls recorded for rollout {rollout!r}", fix="`forge traces ls` lists the rollouts",
                        exit_code=2)
    if as_json:
        typer.echo(json.dumps([r.to_dict() for r in records], indent=2, ensure_ascii=False))
        return
    for r in records:
        latency = f"{r.latency_s * 1000:.0f} ms" if r.latency_s is not None else "-"
        typer.echo(f"#{r.seq:<3} {r.wire_format:<9} {'sse' if r.stream else 'json':<4} {r.status:<14} "
                   f"prompt={r.prompt_tokens or 0:<6} completion={r.completion_tokens or 0:<5} "
                   f"finish={r.finish_reason or '-':<10} {latency:>8}  w={r.weight_version}"
                   + (f"  error: {r.error}" if r.error else ""))


@app.command("export")
def export(out: Annotated[Path, typer.Argument(help="Output file.")], store: Path | None = StoreOpt,
           fmt: str = typer.Option("jsonl", "--format", "-f", help="jsonl or parquet."),
           rollout: str | None = typer.Option(None, "--rollout", help="Only this rollout.")) -> None:
    """Write CallRecords to JSONL or Parquet (schema: forge_cli/traces/record.py)."""
    if fmt not in ("jsonl", "parquet"):
        raise UserError(f"unknown export format {fmt!r}", fix="use --format jsonl or --format parquet", exit_code=2)
    from forge_cli.traces.export import export as run_export

    found = _store(store)
    _conn(found).close()
    try:
        n = run_export(found, out, fmt, rollout)
    except OSError as exc:
        raise UserError(f"cannot write {out}: {exc.strerror or exc}", fix="give a path in a writable directory",
                        exit_code=2) from None
    typer.echo(f"wrote {n} call record(s) to {out}")
