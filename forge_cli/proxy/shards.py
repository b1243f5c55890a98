"""Several capture proxies as one (``proxy.replicas`` local processes, or ``proxy.url`` listing several).

Each rollout lives on one replica: it registers there, its harness's base URL names that replica, and its
records are pulled from that replica into the run's store when it finishes (``client.RemoteProxy.pull``: the same
path for every replica, local or not). New rollouts go to the live replica with the fewest rollouts in flight.
Pause, resume and weight versions go to every live replica. A replica that stops answering gets no new rollout;
the rollouts it held raise ``ProxyUnreachable`` when forge asks for their records, which the rollout runner turns
into ``infra_error`` (never trained on). A local replica's store is a file on this machine: what its writer
committed before the replica died is still copied into the run's store, so nothing recorded is lost.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forge_cli.proxy.client import ProxyUnreachable, RemoteProxy
from forge_cli.runtime.spec import ProxyEndpoint
from forge_cli.traces import store


@dataclass
class Replica:
    """One proxy of the set: its control client (pulling into the run's store), where sandboxes reach it, and
    for a local one the file its writer commits to and how to stop it."""

    client: RemoteProxy
    endpoint: ProxyEndpoint
    local_store: Path | None = None
    stop: Callable[[], int] | None = None
    dead: bool = False
    in_flight: int = 0


@dataclass
class ShardedProxy:
    replicas: list[Replica]
    owner: dict[str, Replica] = field(default_factory=dict)
    # rollouts whose records are in the run's store (pulled, or copied from a dead local replica's file)
    copied: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return ", ".join(r.client.url for r in self.replicas)

    def _pick(self, exclude: set[int]) -> Replica | None:
        with self._lock:
            live = [r for i, r in enumerate(self.replicas) if not r.dead and i not in exclude]
            if not live:
                return None
            chosen = min(live, key=lambda r: r.in_flight)
            chosen.in_flight += 1
            return chosen

    def register(self, rollout_id: str | None = None, **info: Any) -> dict[str, Any]:
        """Register on the least loaded live replica (the next one if it does not answer)."""
        tried: set[int] = set()
        while True:
            replica = self._pick(tried)
            if replica is None:
                raise ProxyUnreachable("no capture proxy replica answers", status=0)
            try:
                answer = replica.client.register(rollout_id, **info)
            except ProxyUnreachable:
                with self._lock:
                    replica.dead, replica.in_flight = True, replica.in_flight - 1
                tried.add(self.replicas.index(replica))
                continue
            self.owner[str(answer["rollout_id"])] = replica
            return {**answer, "sandbox_url": replica.endpoint.url}

    def calls(self, rollout_id: str) -> list[dict[str, Any]]:
        replica = self.owner[rollout_id]
        try:
            return replica.client.calls(rollout_id)
        except ProxyUnreachable:
            replica.dead = True
            raise

    def finish(self, rollout_id: str, status: str = "finished") -> dict[str, Any]:
        """Finish on its replica and pull its records; a dead local replica's committed rows are copied from its
        file, then ``ProxyUnreachable`` says the rollout lost its proxy."""
        replica = self.owner[rollout_id]
        try:
            answer = replica.client.finish(rollout_id, status)
            self.copied.add(rollout_id)
            return answer
        except ProxyUnreachable:
            replica.dead = True
            if replica.local_store is not None and replica.local_store.exists():
                copy_rows(replica.local_store, replica.client.store, rollout_id)
                self.copied.add(rollout_id)
            raise
        finally:
            with self._lock:
                replica.in_flight -= 1

    def _each(self, action: Callable[[RemoteProxy], Any]) -> None:
        for replica in self.replicas:
            if replica.dead:
                continue
            try:
                action(replica.client)
            except ProxyUnreachable:
                replica.dead = True
        if all(r.dead for r in self.replicas):
            raise ProxyUnreachable("no capture proxy replica answers", status=0)

    def pause(self) -> None:
        self._each(lambda c: c.pause())

    def resume(self) -> None:
        self._each(lambda c: c.resume())

    def set_weight_version(self, version: str) -> None:
        self._each(lambda c: c.set_weight_version(version))

    def health(self) -> dict[str, Any]:
        out = []
        for replica in self.replicas:
            try:
                out.append({"url": replica.client.url, **replica.client.health()})
            except ProxyUnreachable:
                replica.dead = True
                out.append({"url": replica.client.url, "ok": False})
        return {"ok": any(r.get("ok") for r in out), "replicas": out}

    def alive(self) -> bool:
        return any(not r.dead for r in self.replicas)

    def stop(self, timeout: float = 20.0) -> int:
        """Stop the local replicas; a local store whose every rollout is in the run's store is removed (the run's
        ``traces.sqlite`` holds those rows), any other stays for ``forge traces`` to read."""
        codes = [replica.stop() for replica in self.replicas if replica.stop is not None]
        for replica in self.replicas:
            mine = {rid for rid, owner in self.owner.items() if owner is replica}
            if replica.local_store is not None and mine <= self.copied:
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{replica.local_store}{suffix}").unlink(missing_ok=True)
        return max(codes, default=0)


def copy_rows(source: Path, target: Path, rollout_id: str) -> int:
    """The rollout's rows of a local store file copied into ``target`` (replacing any copied before)."""

    src = store.open_store(source, readonly=True)
    try:
        rows: list[tuple[Any, ...]] = []
        after: int | None = 0
        while after is not None:
            page, after = store.call_rows(src, rollout_id, after, 1000)
            rows += page
    finally:
        src.close()
    src = store.open_store(source, readonly=True)
    try:
        images = {d: found for d in store.row_blob_refs(rows) if (found := store.get_blob(src, d)) is not None}
    finally:
        src.close()
    conn = store.open_store(target)
    try:
        with conn:
            store.insert_blobs(conn, images)
            store.replace_calls(conn, rollout_id, rows)
    finally:
        conn.close()
    return len(rows)
