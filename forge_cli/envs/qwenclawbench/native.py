"""OpenClaw's own session transcript, read from the sandbox after the harness exits.

QwenClawBench's runner grades the OpenClaw session file (``~/.openclaw/agents/<agent>/sessions/<id>.jsonl``). OpenClaw
2026.9 keeps the same events in SQLite instead: ``transcript_events`` of
``<state dir>/agents/<agent>/agent/openclaw-agent.sqlite``, one row per JSONL line (``event_json``, or
``event_zstd`` for events over 1 KiB, decoded as OpenClaw does). forge's OpenClaw harness runs ``agent exec
--state-dir $HOME/.openclaw`` so that this database stays in the sandbox (without it ``agent exec`` works in a
temporary state directory that it deletes at exit). The database (and its write-ahead log) is copied to the host
and dumped, one event per line, by ``openclaw_session.mjs`` with the Node of the OpenClaw bundle (``node:sqlite``
and zlib's zstd; any Node >= 23.8 on PATH otherwise). An older OpenClaw's JSONL file is read as it is.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

from forge_cli.envs.qwenclawbench.transcript import Entry, parse_jsonl
from forge_cli.envs.verifier import VerifyContext
from forge_cli.paths import bundles_dir

SESSION_GLOB = '"$HOME"/.openclaw/agents/*/sessions/*.jsonl'
DATABASE_GLOB = '"$HOME"/.openclaw/agents/*/agent/openclaw-agent.sqlite'
DUMPER = Path(__file__).with_name("openclaw_session.mjs")


def node_binary() -> str | None:
    """The Node that dumps the database: the OpenClaw bundle's, else one on PATH."""
    bundled = bundles_dir() / "openclaw" / "node" / "bin" / "node"
    return str(bundled) if bundled.is_file() else shutil.which("node")


async def _latest(ctx: VerifyContext, pattern: str) -> str:
    found = await ctx.run(f"ls -t {pattern} 2>/dev/null | head -n 1")
    return found.stdout.strip() if found.ok else ""


async def dump_database(db: Path, timeout: float = 120) -> list[Entry]:
    """The latest session of an OpenClaw agent database as session-file entries; RuntimeError saying why not."""
    node = node_binary()
    if node is None:
        raise RuntimeError("no Node to read OpenClaw's session database (install the openclaw bundle)")
    proc = await asyncio.create_subprocess_exec(node, str(DUMPER), str(db), stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        raise RuntimeError(f"reading OpenClaw's session database took over {timeout:g} s") from None
    if proc.returncode != 0:
        last = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
        raise RuntimeError(f"cannot read OpenClaw's session database: {last[0][:300]}")
    return parse_jsonl(out.decode("utf-8", "replace"))


async def native_transcript(ctx: VerifyContext) -> tuple[list[Entry], str] | None:
    """OpenClaw's session in the sandbox as (entries, where from); None when there is none or it is unreadable
    (the reason logged): the caller converts the proxy's records instead."""
    path = await _latest(ctx, SESSION_GLOB)
    if path:
        text = await ctx.read_text(path)
        if text:
            return parse_jsonl(text), f"openclaw session {path}"
    path = await _latest(ctx, DATABASE_GLOB)
    if not path:
        return None
    with tempfile.TemporaryDirectory(prefix="forge-openclaw-") as tmp:
        local = Path(tmp) / "openclaw-agent.sqlite"
        for suffix in ("", "-wal"):
            try:
                (Path(tmp) / (local.name + suffix)).write_bytes(await ctx.sandbox.read_file(path + suffix))
            except FileNotFoundError:
                if not suffix:
                    return None
        try:
            entries = await dump_database(local)
        except RuntimeError as exc:
            ctx.log(f"openclaw session database {path}: {exc}; converting the proxy's records instead")
            return None
    if not entries:
        return None
    return entries, f"openclaw session database {path}"
