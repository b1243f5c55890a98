"""Isolation of local sandboxes with bubblewrap (``bwrap``): the argv that builds a sandbox, as pure functions.

A local sandbox with isolation is one long-lived bubblewrap process (the *holder*) per sandbox: it creates a
user, PID, IPC and UTS namespace and a mount namespace whose filesystem is built from nothing, and sleeps.
Every command of the sandbox then joins those namespaces with ``nsenter`` (util-linux), so that processes a
command leaves behind live on in the sandbox (as in a container) and the whole sandbox dies with the holder.

What a command in the sandbox sees (``holder_argv``):

- read-only: ``/usr`` and the ``/bin``, ``/sbin``, ``/lib*`` links or directories of the host; a minimal ``/etc``
  (``ETC_ENTRIES``: users, name resolution, TLS certificates, the dynamic linker, alternatives; no shadow, no ssh,
  no credentials); the harness bundle at the spec's ``bundle_mount`` (commands name it by that path);
- writable: the sandbox's workdir and HOME (at their host paths, which is what commands are given), its own
  ``/tmp`` and, for files forge writes at other absolute paths (``/tests``, ``/logs``), their top-level
  directory: all of them directories of this sandbox only;
- a fresh ``/proc`` of its own PID namespace (no host process is visible) and a minimal ``/dev``;
- nothing else: the run directory (proxy admin token, trace store), ``$FORGE_HOME``, the other sandboxes, the
  forge package (its task files and verifiers) and every other host path do not exist. ``HIDDEN`` paths that
  happen to lie under a mounted system directory (a forge installed into ``/usr/local``) are covered by an
  empty tmpfs. The root is read-only;
- uid and gid 65534 (nobody) in a user namespace, no capabilities, ``nosuid`` mounts.

Not enforced: the network. The sandbox shares the host's network namespace (bubblewrap cannot filter by port,
and a private one could not reach the proxy on the host's loopback), so it reaches every port on loopback and
every address the host reaches, and abstract unix sockets. CPU, memory and pids limits stay advisory.
"""

from __future__ import annotations

import functools
import logging
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from forge_cli.errors import UserError

log = logging.getLogger("forge.runtime")

Mode = Literal["auto", "bwrap", "none"]
# the sandbox's uid and gid (nobody): no capabilities, owner of nothing on the host
SANDBOX_UID = 65534
# top-level entries of the host mirrored read-only (a directory is bound, a symlink such as /bin -> usr/bin kept)
SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
# what programs need from /etc; anything else (shadow, ssh keys, docker/kube credentials) stays out
ETC_ENTRIES = (
    "alternatives", "bash.bashrc", "ca-certificates", "ca-certificates.conf", "debian_version", "environment",
    "gai.conf", "group", "host.conf", "hostname", "hosts", "inputrc", "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
    "localtime", "magic", "magic.mime", "mime.types", "nsswitch.conf", "os-release", "passwd", "profile",
    "protocols", "python3", "python3.11", "python3.12", "resolv.conf", "services", "ssl", "timezone",
)
# top-level names a forge-written file may not claim as a writable directory of its own
RESERVED_TOPS = frozenset({*SYSTEM_DIRS, "etc", "proc", "dev", "sys", "tmp", "run"})
# what the holder prints once the sandbox is built
READY = "forge-sandbox-ready"
# the holder's program: its line tells forge that the filesystem is complete (bwrap reports its child earlier)
HOLDER_COMMAND = ("/bin/sh", "-c", f"echo {READY} && exec sleep infinity")
FIX = ("install bubblewrap (Debian/Ubuntu: apt-get install -y bubblewrap, or scripts/setup.sh core) and allow user "
       "namespaces (sysctl user.max_user_namespaces > 0; kernel.unprivileged_userns_clone=1 where it exists); "
       "or set runtime.isolation=none to run local sandboxes unisolated")
UNISOLATED = ("local sandboxes run WITHOUT isolation: the agent runs as your user and can read the run directory "
              "(proxy admin token, traces), $FORGE_HOME, other rollouts' workdirs and forge's task files with their "
              "verify commands")


@dataclass(frozen=True)
class Layout:
    """One sandbox's host directories and what it mounts."""

    work: Path
    home: Path
    # the sandbox's /tmp
    tmp: Path
    # files forge writes at other absolute paths: <fs>/<top>/... is the sandbox's /<top>/...
    fs: Path
    bundle: Path | None = None
    bundle_mount: str | None = None


@dataclass(frozen=True)
class Probe:
    """Whether bubblewrap can build sandboxes here; ``reason`` says why not."""

    usable: bool
    bwrap: str | None
    nsenter: str | None
    reason: str = ""


@dataclass(frozen=True)
class Decision:
    """Whether a sandbox is isolated, and the warning to give when it is not."""

    isolate: bool
    warning: str | None = None


def _under(path: PurePosixPath, parent: PurePosixPath) -> bool:
    return path == parent or parent in path.parents


def system_mounts(is_symlink: Callable[[str], str | None], exists: Callable[[str], bool]) -> list[str]:
    """bwrap arguments mirroring ``SYSTEM_DIRS`` read-only; ``is_symlink(path)`` gives a link's target or None."""
    args: list[str] = []
    for name in SYSTEM_DIRS:
        path = f"/{name}"
        target = is_symlink(path)
        if target is not None:
            args += ["--symlink", target, path]
        elif exists(path):
            args += ["--ro-bind", path, path]
    return args


def mounted_sources(layout: Layout) -> list[PurePosixPath]:
    """Host paths visible in the sandbox (read-only system paths first)."""
    sources = [PurePosixPath(f"/{name}") for name in SYSTEM_DIRS]
    sources += [PurePosixPath("/etc") / entry for entry in ETC_ENTRIES]
    if layout.bundle is not None:
        sources.append(PurePosixPath(layout.bundle))
    return sources


def hidden_mounts(layout: Layout, hidden: Sequence[Path]) -> list[str]:
    """``--tmpfs`` over each hidden host path that lies under something the sandbox mounts (else it is absent)."""
    args: list[str] = []
    sources = mounted_sources(layout)
    for path in hidden:
        pure = PurePosixPath(path)
        if any(_under(pure, source) for source in sources) and not any(_under(source, pure) for source in sources):
            args += ["--tmpfs", str(pure)]
    return args


def holder_argv(bwrap: str, layout: Layout, tops: Sequence[str], system: Sequence[str],
                hidden: Sequence[Path] = (), uid: int = SANDBOX_UID) -> list[str]:
    """The bwrap command of a sandbox's holder: namespaces, the filesystem described in the module, ``sleep``.

    ``tops``: the top-level directories under ``layout.fs`` (each mounted writable at ``/<top>``); ``system``:
    what :func:`system_mounts` returned; ``hidden``: host paths that must not be readable.
    """
    argv = [bwrap, "--unshare-user", "--uid", str(uid), "--gid", str(uid), "--unshare-pid", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try", "--hostname", "forge-sandbox", "--die-with-parent",
            *system, "--dir", "/etc"]
    for entry in ETC_ENTRIES:
        argv += ["--ro-bind-try", f"/etc/{entry}", f"/etc/{entry}"]
    argv += ["--proc", "/proc", "--dev", "/dev", "--bind", str(layout.tmp), "/tmp"]
    for top in sorted(tops):
        if top not in RESERVED_TOPS:
            argv += ["--bind", str(layout.fs / top), f"/{top}"]
    argv += ["--bind", str(layout.work), str(layout.work), "--bind", str(layout.home), str(layout.home)]
    if layout.bundle is not None:
        # at the spec's path only: its host path lies in $FORGE_HOME, which must not show even as a name
        argv += ["--ro-bind", str(layout.bundle), layout.bundle_mount or str(layout.bundle)]
    argv += [*hidden_mounts(layout, hidden), "--remount-ro", "/", "--chdir", str(layout.work), *HOLDER_COMMAND]
    return argv


def enter_argv(nsenter: str, pid: int, cwd: str, argv: Sequence[str]) -> list[str]:
    """A command run in the namespaces of the holder whose sandbox init is ``pid``, in ``cwd`` (a sandbox path),
    as the sandbox's user (``--preserve-credentials``: uid 65534, and no capabilities once it execs)."""
    return [nsenter, "-t", str(pid), "-U", "-m", "-p", "--preserve-credentials", "--",
            "/usr/bin/env", "-C", cwd, "--", *argv]


def host_path(layout: Layout, path: str, mapped: Sequence[tuple[str, Path]]) -> Path:
    """Where a sandbox path (absolute) lives on the host: the spec's paths (``mapped``, first match wins; the
    workdir, HOME and bundle), the sandbox's /tmp, else ``layout.fs``."""
    pure = PurePosixPath(path)
    for prefix, target in [(str(layout.work), layout.work), (str(layout.home), layout.home), *mapped]:
        if _under(pure, PurePosixPath(prefix)):
            return target / pure.relative_to(prefix)
    if _under(pure, PurePosixPath("/tmp")):
        return layout.tmp / pure.relative_to("/tmp")
    return layout.fs / pure.relative_to("/")


def sandbox_path(layout: Layout, path: Path) -> str:
    """What a host directory of the sandbox is called inside it (the inverse of :func:`host_path`)."""
    for prefix, inside in ((layout.work, str(layout.work)), (layout.home, str(layout.home)), (layout.tmp, "/tmp"),
                           (layout.fs, "/")):
        if path == prefix or prefix in path.parents:
            return str(PurePosixPath(inside) / path.relative_to(prefix))
    return str(path)


def fs_tops(layout: Layout) -> list[str]:
    """The top-level directories forge created under ``layout.fs`` (mounted at ``/<top>``)."""
    if not layout.fs.is_dir():
        return []
    return sorted(p.name for p in layout.fs.iterdir() if p.is_dir() and p.name not in RESERVED_TOPS)


@functools.cache
def probe() -> Probe:
    """Can bubblewrap build a sandbox here (installed, and user and PID namespaces allowed)? Cached per process."""
    bwrap, nsenter = shutil.which("bwrap"), shutil.which("nsenter")
    if bwrap is None:
        return Probe(False, None, nsenter, "bubblewrap (bwrap) is not installed")
    if nsenter is None:
        return Probe(False, bwrap, None, "nsenter (util-linux) is not installed")
    try:
        proc = subprocess.run([bwrap, "--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
                               "--unshare-pid", "--ro-bind", "/", "/", "true"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Probe(False, bwrap, nsenter, f"bwrap did not run: {exc}")
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return Probe(False, bwrap, nsenter, f"bwrap cannot create namespaces here ({why})")
    return Probe(True, bwrap, nsenter)


def decide(mode: Mode, found: Probe) -> Decision:
    """``auto``: isolate when bubblewrap works, else run unisolated with a warning; ``bwrap``: isolate or fail
    (exit 1, with the fix); ``none``: unisolated, with a warning."""
    if mode == "none":
        return Decision(False, f"runtime.isolation=none: {UNISOLATED}")
    if found.usable:
        return Decision(True)
    if mode == "bwrap":
        raise UserError(f"runtime.isolation=bwrap, but {found.reason}", fix=FIX, exit_code=1)
    return Decision(False, f"{found.reason}: {UNISOLATED}. Fix: {FIX}")


_warned: set[tuple[str, str]] = set()


def warn_once(message: str, key: str = "") -> bool:
    """Print ``message`` as a warning on stderr (and to the log) once per ``key`` (a run id); True if printed."""
    if (key, message) in _warned:
        return False
    _warned.add((key, message))
    log.warning(message)
    print(f"forge: WARNING: {message}", file=sys.stderr, flush=True)
    return True
