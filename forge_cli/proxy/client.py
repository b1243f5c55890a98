"""Talking to a capture proxy over its control API (``/forge/v1/``, see ``control.py``), wherever it runs.

``ProxyClient`` is what forge does with any proxy: register rollouts (their keys), finish them, read their
records, pause/resume, stamp weight versions, health and metrics. The proxy forge starts itself
(``launcher.ProxyHandle``) adds its child process; ``RemoteProxy`` is a proxy forge did not start (``proxy.url``: on
another machine, in a container, in a cluster) and pulls each finished rollout's records into the run's own store
over the API, paged and idempotently (a rollout pulled again replaces its rows), so nothing depends on a file on
another machine's disk.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forge_cli.errors import UserError
from forge_cli.traces import store

# rows per page when pulling a rollout's records (each row holds its request and response bodies)
PAGE_ROWS = 64


class ProxyError(RuntimeError):
    """A control request the proxy answered with an error status (``status`` holds it)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class ProxyUnreachable(ProxyError):
    """The proxy did not answer at all (connection refused or reset, timeout): it is gone."""


@dataclass
class ProxyClient:
    """The control API of the proxy at ``url`` with its admin token."""

    url: str
    admin_token: str

    def _client(self, timeout: float = 60) -> Any:
        import httpx

        return httpx.Client(base_url=self.url, headers={"authorization": f"Bearer {self.admin_token}"},
                            timeout=timeout)

    def _call(self, method: str, path: str, json: Any = None, params: dict[str, Any] | None = None) -> Any:
        import httpx

        try:
            with self._client() as client:
                resp = client.request(method, "/forge/v1/" + path, json=json, params=params)
        except httpx.TransportError as exc:
            raise ProxyUnreachable(f"proxy control {method} {path}: {self.url} does not answer ({exc})", 0) from exc
        if resp.status_code >= 400:
            raise ProxyError(f"proxy control {method} {path}: {resp.status_code} {resp.text}", resp.status_code)
        return resp.json() if resp.headers.get("content-type", "").startswith("application/json") else resp.text

    def register(self, rollout_id: str | None = None, **info: Any) -> dict[str, Any]:
        """Register a rollout; the answer holds ``key`` and ``base_url`` (``…/r/<id>``, add ``/v1`` for OpenAI)."""
        data = self._call("POST", "rollouts", {"rollout_id": rollout_id, **info})
        data["base_url"] = f"{self.url}/r/{data['rollout_id']}"
        return dict(data)

    def finish(self, rollout_id: str, status: str = "finished") -> dict[str, Any]:
        return dict(self._call("POST", f"rollouts/{rollout_id}/finish", {"status": status}))

    def calls(self, rollout_id: str) -> list[dict[str, Any]]:
        return list(self._call("GET", f"rollouts/{rollout_id}/calls")["calls"])

    def rows(self, rollout_id: str, after: int = 0, limit: int = PAGE_ROWS) -> dict[str, Any]:
        """One page of the rollout's stored rows as they are in the store (``columns``, ``rows``, ``next``: the
        cursor of the next page or None)."""
        return dict(self._call("GET", f"rollouts/{rollout_id}/rows", params={"after": after, "limit": limit}))

    def blob(self, digest: str) -> tuple[str, bytes]:
        """(media type, content) of an image the records reference (``traces/blobs.py``), as stored."""
        import httpx

        try:
            with self._client() as client:
                resp = client.get(f"/forge/v1/blobs/{digest}")
        except httpx.TransportError as exc:
            raise ProxyUnreachable(f"proxy control GET blobs/{digest}: {self.url} does not answer ({exc})", 0) from exc
        if resp.status_code >= 400:
            raise ProxyError(f"proxy control GET blobs/{digest}: {resp.status_code} {resp.text}", resp.status_code)
        return resp.headers.get("content-type", ""), bytes(resp.content)

    def rollouts(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "rollouts")["rollouts"])

    def pause(self) -> None:
        self._call("POST", "pause")

    def resume(self) -> None:
        self._call("POST", "resume")

    def set_weight_version(self, version: str) -> None:
        self._call("PUT", "weight_version", {"version": version})

    def metrics(self) -> str:
        return str(self._call("GET", "metrics"))

    def health(self) -> dict[str, Any]:
        return dict(self._call("GET", "health"))


@dataclass
class RemoteProxy(ProxyClient):
    """A proxy forge did not start; every finished rollout's records are pulled into ``store`` (the run's)."""

    store: Path

    @property
    def upstreams(self) -> list[str]:
        return [str(u.get("url")) for u in self.health().get("upstreams", [])]

    def finish(self, rollout_id: str, status: str = "finished") -> dict[str, Any]:
        answer = super().finish(rollout_id, status)
        pulled = self.pull(rollout_id, info={k: answer.get(k) for k in ("task", "group_id", "harness", "status",
                                                                        "created", "finished")})
        return {**answer, "pulled": pulled}

    def pull(self, rollout_id: str, info: dict[str, Any] | None = None) -> int:
        """Copy the rollout's rows into the run's store (replacing any copied before); returns how many."""

        rows: list[tuple[Any, ...]] = []
        after: int | None = 0
        while after is not None:
            page = self.rows(rollout_id, after=after)
            if tuple(page["columns"]) != store.CALL_FIELDS:
                raise UserError(f"the proxy at {self.url} stores other columns than this forge: "
                                f"{page['columns']}", fix="run the same forge version on both sides")
            rows += [tuple(r) for r in page["rows"]]
            after = page.get("next")
        conn = store.open_store(self.store)
        try:
            missing = [d for d in store.row_blob_refs(rows) if store.get_blob(conn, d) is None]
            images = {d: self.blob(d) for d in missing}
            with conn:
                store.insert_blobs(conn, images)
                store.replace_calls(conn, rollout_id, rows)
                store.upsert_rollout(conn, {"rollout_id": rollout_id,
                                            **{k: v for k, v in (info or {}).items() if v is not None}})
        finally:
            conn.close()
        return len(rows)

    def alive(self) -> bool:
        try:
            return bool(self.health().get("ok"))
        except Exception:
            return False

    def stop(self, timeout: float = 20.0) -> int:
        """Nothing to stop: forge did not start this proxy."""
        return 0


def connect(url: str, token: str | None, token_env: str, store: Path) -> RemoteProxy:
    """A remote proxy, checked: it answers (else exit 1, the machine or network must be fixed) and takes the
    admin token (else exit 2, the user's token is wrong)."""
    import httpx

    if not token:
        raise UserError(f"proxy.url={url}: no admin token in ${token_env}",
                        fix=f"export {token_env}=<the token the proxy was started with> (forge proxy "
                            f"--admin-token-env {token_env} takes it from the same variable)", exit_code=2)
    remote = RemoteProxy(url=url.rstrip("/"), admin_token=token, store=store)
    try:
        health = httpx.get(remote.url + "/forge/v1/health", timeout=10)
        health.raise_for_status()
        health.json()["ok"]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        raise UserError(f"the capture proxy at {url} does not answer: {exc}",
                        fix="start it (forge proxy --host 0.0.0.0 --port P --admin-token-env "
                            f"{token_env} --upstream URL) or fix proxy.url") from None
    try:
        remote.rollouts()
    except ProxyError as exc:
        if exc.status == 401:
            raise UserError(f"the capture proxy at {url} refused the admin token in ${token_env}",
                            fix=f"set {token_env} to the token the proxy was started with", exit_code=2) from None
        raise UserError(f"the capture proxy at {url}: {exc}") from None
    return remote
