"""Start forge's capture proxy (``remote/mitmproxy/main.py``: mitmproxy's core + forge's addon) as a child process;
talk to its API.

``start_proxy(...)`` returns a ``ProxyHandle``: the control API of ``client.ProxyClient`` (register/finish/calls,
pause/resume, weight version) plus the store path, the child process and ``stop``. ``forge proxy``, ``forge rollout``
and the tests use it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forge_cli.errors import UserError
from forge_cli.paths import env_dir, forge_home
from forge_cli.ports import free_port as free_port  # re-exported: callers start proxies on it
from forge_cli.procs import die_with_parent
from forge_cli.proxy.client import ProxyClient

# forge's package, wherever it is installed (a checkout, or site-packages from a wheel)
PACKAGE_DIR = Path(__file__).resolve().parents[1]
# what the mitmproxy child imports of forge, relative to the package (the addon, the plugin registry its wire formats
# use, and its two entry points in remote/mitmproxy/: the proxy process and the store writer): stdlib + mitmproxy only.
# Each is a symlink into this installation; the directories above them (forge_cli/, remote/) are real ones.
CHILD_PATHS = ("__init__.py", "proxy", "traces", "plugins.py", "remote/__init__.py", "remote/mitmproxy")


def mitmdump_path() -> Path:
    """mitmdump from forge's mitmproxy environment (``scripts/setup.sh mitmproxy`` builds it)."""
    return env_dir("mitmproxy") / "bin" / "mitmdump"


def child_import_root() -> Path:
    """The mitmproxy child's only import path from forge: a directory holding just ``forge_cli/__init__.py``,
    the ``proxy`` and ``traces`` subpackages, ``plugins.py`` and ``remote/mitmproxy/`` (``CHILD_PATHS``), as
    symlinks into this installation.

    Putting the package's parent directory on the child's ``PYTHONPATH`` would, for a wheel install, put
    forge's whole site-packages ahead of mitmproxy's own pinned dependencies (h11) — the conflict that the
    child's separate environment exists to avoid. Built once per installation under
    ``$FORGE_HOME/cache/proxy-import/`` (atomically: concurrent launches share it).
    """
    key = hashlib.sha256(str(PACKAGE_DIR).encode()).hexdigest()[:16]
    root = forge_home() / "cache" / "proxy-import" / key
    if _import_root_ok(root):
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=root.parent))
    try:
        pkg = tmp / "forge_cli"
        for rel in CHILD_PATHS:
            (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
            (pkg / rel).symlink_to(PACKAGE_DIR / rel, target_is_directory=(PACKAGE_DIR / rel).is_dir())
        if root.exists() or root.is_symlink():  # stale (forge moved, or a partial copy): replace it
            shutil.rmtree(root, ignore_errors=True)
        with contextlib.suppress(OSError):  # another launch won the race: use its (identical) directory
            tmp.rename(root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if not _import_root_ok(root):
        raise UserError(f"cannot prepare the proxy's import path at {root}",
                        fix=f"check that {root.parent} is writable (or set FORGE_HOME)")
    return root


def _import_root_ok(root: Path) -> bool:
    """``root`` holds ``CHILD_PATHS``, each a symlink to this installation's, and nothing else."""
    pkg = root / "forge_cli"
    expected: dict[Path, set[str]] = {}  # each real directory of the root -> the entries it holds
    for rel in CHILD_PATHS:
        parts = Path(rel).parts
        for depth, name in enumerate(parts):
            expected.setdefault(pkg.joinpath(*parts[:depth]), set()).add(name)
    try:
        return all({p.name for p in d.iterdir()} - {"__pycache__"} == names and not d.is_symlink()
                   for d, names in expected.items()) and all(
            (pkg / rel).is_symlink() and (pkg / rel).resolve() == PACKAGE_DIR / rel for rel in CHILD_PATHS)
    except OSError:
        return False




def upstream_context(url: str, timeout: float = 3.0) -> int:
    """The upstream's ``max_model_len`` from ``/v1/models`` (0 when it does not say or is unreachable)."""
    import httpx

    try:
        data = httpx.get(url.rstrip("/").removesuffix("/v1") + "/v1/models", timeout=timeout).json()
        return int(data["data"][0].get("max_model_len") or 0)
    except Exception:
        return 0


@dataclass
class ProxyHandle(ProxyClient):
    """A proxy forge started: its control API (``ProxyClient``) plus its store, token file and child process."""

    store: Path
    token_file: Path
    log_file: Path
    process: subprocess.Popen[bytes]
    upstreams: list[str] = field(default_factory=list)

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, wait for the writer's last commit, SIGKILL if it hangs; returns the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return int(self.process.returncode)

    def __enter__(self) -> ProxyHandle:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def start_proxy(
    upstreams: list[str] | str,
    port: int = 0,
    store: str | Path | None = None,
    host: str = "127.0.0.1",
    max_body_mb: int = 32,
    max_output_tokens: int | None = None,
    model: str = "",
    upstream_timeout_s: float = 900.0,
    max_header_kb: int = 64,
    weight_version: str = "0",
    sampling: dict[str, Any] | None = None,
    ready_timeout_s: float = 30.0,
    extra_args: list[str] | None = None,
    admin_token: str | None = None,
    capture: bool = True,
    upstream_key_env: str | None = None,
    rollout_header: bool = False,
) -> ProxyHandle:
    """Run mitmdump in reverse mode with forge's addon, bound to ``host`` (loopback), and wait until it serves.

    ``max_output_tokens=None`` reads the first upstream's context length from ``/v1/models``. ``sampling`` (e.g.
    ``{"temperature": 0.3}``) replaces the harness's sampling parameters on every call. ``admin_token`` (e.g. from a
    deployment's secret) instead of a new random one. ``capture=False``: ask the upstream for no token ids (an
    external API). ``upstream_key_env``: the environment variable holding the upstream's API key; only its name
    goes on the child's command line, the child reads the key from its environment. ``rollout_header``: name each
    call's rollout to the upstream in an ``x-forge-rollout`` header (a replay upstream needs it; off for others).
    """
    from forge_cli.config.schema import upstream_urls

    try:  # the user's input is checked here, before the child starts (its errors would be a traceback in its log)
        urls = upstream_urls(upstreams if isinstance(upstreams, str) else ",".join(upstreams))
    except ValueError as exc:
        raise UserError(f"upstream: {exc}", fix="pass --upstream http://127.0.0.1:8000[,URL...]", exit_code=2) from None
    if upstream_key_env and not os.environ.get(upstream_key_env):
        raise UserError(f"the upstream's API key: ${upstream_key_env} is not set",
                        fix=f"export {upstream_key_env}=<key>", exit_code=2)
    mitmdump = mitmdump_path()
    if not mitmdump.exists():
        raise UserError(f"mitmdump not found at {mitmdump}", fix="run: scripts/setup.sh mitmproxy")
    try:
        port = port or free_port(host)
    except OSError as exc:
        raise UserError(f"the proxy cannot listen on {host!r}: {exc.strerror or exc}",
                        fix="bind a local address, e.g. 127.0.0.1", exit_code=2) from None
    run_dir = forge_home() / "proxy" / f"{time.strftime('%Y%m%d-%H%M%S')}-{port}"
    store_path = Path(store).expanduser().resolve() if store else run_dir / "traces.sqlite"
    try:
        store_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"trace store {store_path}: cannot create its directory ({exc.strerror or exc})",
                        fix="give a path in a writable directory", exit_code=2 if store else 1) from None
    token = admin_token or secrets.token_urlsafe(32)
    token_file = store_path.with_name(store_path.name + f".{port}.admin-token")
    token_file.touch(mode=0o600)
    token_file.write_text(token + "\n")
    log_file = store_path.with_name(store_path.name + f".{port}.mitmdump.log")
    if max_output_tokens is None:
        max_output_tokens = upstream_context(urls[0])
    settings = {
        "connection_strategy": "lazy",
        "body_size_limit": f"{max_body_mb}m",
        "termlog_verbosity": "warn",
        "forge_upstreams": ",".join(urls),
        "forge_store": str(store_path),
        "forge_admin_token_file": str(token_file),
        "forge_max_output_tokens": str(max_output_tokens),
        "forge_model": model,
        "forge_upstream_timeout": str(max(1, round(upstream_timeout_s))),
        "forge_max_header_kb": str(max_header_kb),
        "forge_weight_version": weight_version,
        "forge_sampling": json.dumps(sampling or {}, separators=(",", ":")),
        "forge_capture": str(capture).lower(),
        "forge_upstream_key_env": upstream_key_env or "",
        "forge_rollout_header": str(rollout_header).lower(),
    }
    cmd = [str(mitmdump.with_name("python")), "-m", "forge_cli.remote.mitmproxy.main",
           "--mode", f"reverse:{urls[0]}@{host}:{port}"]
    for key, value in settings.items():
        cmd += ["--set", f"{key}={value}"]
    cmd += extra_args or []
    # forge's proxy-side packages and nothing else of this environment; the working directory is that same
    # directory too (``python -m`` puts it first on sys.path)
    import_root = child_import_root()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE")}
    env["PYTHONPATH"] = str(import_root)
    env["PYTHONNOUSERSITE"] = "1"
    if env.get("FORGE_PROXY_PROFILE"):  # main.py's profile output, relative to the caller's directory, not the child's
        env["FORGE_PROXY_PROFILE"] = os.path.abspath(env["FORGE_PROXY_PROFILE"])
    with open(log_file, "ab") as log:
        # SIGTERM when forge dies (kill -9 included): the proxy stops cleanly, its writer flushes every record
        process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                   cwd=str(import_root), preexec_fn=die_with_parent())
    handle = ProxyHandle(url=f"http://{host}:{port}", admin_token=token, store=store_path, token_file=token_file,
                         log_file=log_file, process=process, upstreams=urls)
    _wait_ready(handle, ready_timeout_s)
    return handle


def _wait_ready(handle: ProxyHandle, timeout: float) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if handle.process.poll() is not None:
            break
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(handle.url + "/forge/v1/health", timeout=1.0).status_code == 200:
                return
        time.sleep(0.1)
    handle.stop(5)
    tail = handle.log_file.read_text(errors="replace")[-2000:] if handle.log_file.exists() else ""
    raise UserError(f"the capture proxy did not start (mitmdump exit {handle.process.returncode}):\n{tail}",
                    fix=f"see {handle.log_file}; check the port is free and scripts/setup.sh mitmproxy ran")
