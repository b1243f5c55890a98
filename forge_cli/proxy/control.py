"""The control API under ``/forge/v1/`` (same port as the proxy, admin token required except for health).

POST /forge/v1/rollouts                  {"rollout_id"?, "task"?, "group_id"?, "harness"?, "meta"?, "sampling"?}
                                         -> id + key ("sampling": fields such as temperature enforced on this
                                         rollout's calls over the proxy's own forge_sampling)
POST /forge/v1/rollouts/<id>/finish      {"status"?} -> the rollout, once all its records are committed
GET  /forge/v1/rollouts                  registered rollouts (this proxy run)
GET  /forge/v1/rollouts/<id>/calls       the rollout's CallRecords from the store
GET  /forge/v1/rollouts/<id>/rows?after=&limit=   a page of its rows exactly as stored (a remote forge copies them
                                         into its run's store: forge_cli/proxy/client.py RemoteProxy)
GET  /forge/v1/blobs/<sha256>            an image the records reference (forge_cli/traces/blobs.py), as stored
POST /forge/v1/pause | /forge/v1/resume  new model calls wait while paused; in-flight ones finish
GET|PUT /forge/v1/weight_version         {"version": "..."} stamped on every record forwarded after it
GET  /forge/v1/health                    liveness, upstream health, pause state (no token needed)
GET  /forge/v1/metrics                   Prometheus text
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from forge_cli.proxy import auth
from forge_cli.proxy.metrics import Metrics
from forge_cli.proxy.sink import RecordSink
from forge_cli.proxy.state import Registry
from forge_cli.traces import store
from forge_cli.traces.store import CALL_FIELDS

PREFIX = "/forge/v1/"
JSON = "application/json"
Reply = tuple[int, str, bytes]


def _json(status: int, obj: Any) -> Reply:
    return status, JSON, json.dumps(obj, separators=(",", ":")).encode()


def _error(status: int, message: str) -> Reply:
    return _json(status, {"error": {"message": message, "type": "forge_control", "code": status}})


@dataclass
class Control:
    """What the control API acts on."""

    registry: Registry
    sink: RecordSink
    metrics: Metrics
    store_path: str
    admin_digest: bytes
    on_resume: Callable[[], None]

    async def handle(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> Reply:
        """Answer one control request."""
        route = path.split("?", 1)[0][len(PREFIX):].strip("/")
        if route == "health" and method == "GET":
            return self._health()
        if not auth.matches(auth.presented_key(headers), self.admin_digest):
            self.metrics.error("unauthorized")
            return _error(401, "missing or wrong admin token")
        try:
            payload = json.loads(body) if body.strip() else {}
        except ValueError:
            self.metrics.error("bad_json")
            return _error(400, "control request body is not valid JSON")
        if not isinstance(payload, dict):
            return _error(400, "control request body must be a JSON object")
        parts = route.split("/")
        if route == "rollouts":
            if method == "POST":
                return self._register(payload)
            if method == "GET":
                return _json(200, {"rollouts": [r.public() for r in self.registry.rollouts.values()]})
        if len(parts) == 3 and parts[0] == "rollouts":
            rollout = self.registry.rollouts.get(parts[1])
            if rollout is None:
                return _error(404, f"unknown rollout {parts[1]!r}")
            if parts[2] == "finish" and method == "POST":
                return await self._finish(parts[1], payload)
            if parts[2] == "calls" and method == "GET":
                return await self._calls(parts[1])
            if parts[2] == "rows" and method == "GET":
                return await self._rows(parts[1], path)
        if len(parts) == 2 and parts[0] == "blobs" and method == "GET":
            return await self._blob(parts[1])
        if route in ("pause", "resume") and method == "POST":
            self.registry.paused = route == "pause"
            if route == "resume":
                self.on_resume()
            return _json(200, {"paused": self.registry.paused})
        if route == "weight_version":
            if method in ("PUT", "POST"):
                version = payload.get("version")
                if not isinstance(version, (str, int)) or isinstance(version, bool):
                    return _error(400, "weight_version: body must be {\"version\": <string>}")
                self.registry.weight_version = str(version)
            if method in ("GET", "PUT", "POST"):
                return _json(200, {"version": self.registry.weight_version})
        if route == "metrics" and method == "GET":
            extra = {"forge_proxy_paused": float(self.registry.paused),
                     "forge_proxy_records_committed": float(self.sink.committed),
                     "forge_proxy_upstreams_healthy": float(sum(u.healthy for u in self.registry.upstreams))}
            return 200, "text/plain; version=0.0.4", self.metrics.render(extra).encode()
        self.metrics.error("unknown_route")
        return _error(404, f"no control endpoint {method} {path}")

    def _health(self) -> Reply:
        ups = [{"url": u.url, "healthy": u.healthy, "rollouts": u.assigned} for u in self.registry.upstreams]
        return _json(200, {"ok": True, "paused": self.registry.paused, "weight_version": self.registry.weight_version,
                           "in_flight": self.metrics.in_flight, "upstreams": ups, "writer_alive": self.sink.proc.poll()
                           is None})

    def _register(self, payload: dict[str, Any]) -> Reply:
        try:
            rollout, key = self.registry.register(payload.get("rollout_id"), payload)
        except ValueError as exc:
            return _error(400, str(exc))
        except KeyError:
            return _error(409, f"rollout {payload.get('rollout_id')!r} is registered and not finished")
        self._emit(rollout.rollout_id, {"task": rollout.task, "group_id": rollout.group_id, "harness": rollout.harness,
                                        "status": rollout.status, "meta": json.dumps(rollout.meta)})
        return _json(201, {**rollout.public(), "key": key, "path": f"/r/{rollout.rollout_id}"})

    def _emit(self, rollout_id: str, info: dict[str, Any]) -> None:
        info = {"rollout_id": rollout_id, "created": time.time(), **info}
        self.sink.send({"type": "rollout", "info": info}, {})

    async def _finish(self, rollout_id: str, payload: dict[str, Any]) -> Reply:
        rollout = self.registry.rollouts[rollout_id]
        rollout.finished = rollout.finished or time.time()
        rollout.status = str(payload.get("status") or "finished")
        self._emit(rollout_id, {"status": rollout.status, "finished": rollout.finished})
        committed = await self.sink.wait_committed()
        return _json(200 if committed else 503, {**rollout.public(), "committed": committed})

    async def _rows(self, rollout_id: str, path: str) -> Reply:
        from urllib.parse import parse_qs, urlsplit

        query = parse_qs(urlsplit(path).query)
        try:
            after = int(query.get("after", ["0"])[0])
            limit = int(query.get("limit", ["64"])[0])
        except ValueError:
            return _error(400, "rows: after and limit must be integers")
        if after < 0 or not 1 <= limit <= 1000:
            return _error(400, "rows: after >= 0 and 1 <= limit <= 1000")
        if not await self.sink.wait_committed():
            return _error(503, "the store writer has not committed this rollout's calls yet")

        def read() -> tuple[list[tuple[Any, ...]], int | None]:

            conn = store.open_store(self.store_path, readonly=True)
            try:
                return store.call_rows(conn, rollout_id, after, limit)
            finally:
                conn.close()


        rows, cursor = await asyncio.to_thread(read)
        return _json(200, {"rollout_id": rollout_id, "columns": list(CALL_FIELDS), "rows": rows, "next": cursor})

    async def _blob(self, digest: str) -> Reply:
        if not await self.sink.wait_committed():
            return _error(503, "the store writer has not committed its records yet")

        def read() -> tuple[str, bytes] | None:

            conn = store.open_store(self.store_path, readonly=True)
            try:
                return store.get_blob(conn, digest)
            finally:
                conn.close()

        found = await asyncio.to_thread(read)
        if found is None:
            return _error(404, f"no blob {digest!r}")
        return 200, found[0] or "application/octet-stream", found[1]

    async def _calls(self, rollout_id: str) -> Reply:
        if not await self.sink.wait_committed():
            return _error(503, "the store writer has not committed this rollout's calls yet")

        def read() -> list[dict[str, Any]]:

            conn = store.open_store(self.store_path, readonly=True)
            try:
                return [r.to_dict() for r in store.iter_calls(conn, rollout_id)]
            finally:
                conn.close()

        calls = await asyncio.to_thread(read)
        return _json(200, {"rollout_id": rollout_id, "calls": calls})
