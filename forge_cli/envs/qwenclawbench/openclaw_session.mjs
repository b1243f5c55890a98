// OpenClaw's session transcript (agents/<agent>/agent/openclaw-agent.sqlite) as the JSONL file it used to write:
// one event per line, in order, for the session written last. Events over 1 KiB may be stored zstd-compressed
// (event_zstd, event_utf8_bytes); they are decoded as OpenClaw itself does. Usage: node openclaw_session.mjs DB
import { DatabaseSync } from "node:sqlite";
import zlib from "node:zlib";

const db = new DatabaseSync(process.argv[2]);
const latest = db.prepare(
  "SELECT session_id FROM transcript_events GROUP BY session_id ORDER BY max(created_at) DESC, max(rowid) DESC LIMIT 1",
).get();
if (latest) {
  const rows = db.prepare(
    "SELECT event_json, event_zstd, event_utf8_bytes FROM transcript_events WHERE session_id = ? ORDER BY seq",
  ).all(latest.session_id);
  for (const row of rows) {
    const text = row.event_json ?? new TextDecoder("utf-8", { fatal: true }).decode(
      zlib.zstdDecompressSync(Buffer.from(row.event_zstd), { maxOutputLength: Number(row.event_utf8_bytes) }));
    process.stdout.write(text + "\n");
  }
}
db.close();
