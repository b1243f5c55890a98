"""The capture proxy process: mitmproxy's proxy core with just the addons forge needs, plus forge's own.

    <mitmproxy env>/bin/python -m forge_cli.remote.mitmproxy.main --mode reverse:URL@127.0.0.1:PORT [--set k=v ...]

Run inside mitmproxy's virtual environment as a child process (``proxy/launcher.py`` starts it), like ``mitmdump``
but without mitmdump's ~35 default addons (playback, map-local/remote, cookies, HAR export, the flow
dumper, the script loader...). mitmproxy dispatches every hook of every request to every loaded addon;
on this machine that dispatch alone cost more CPU per request than forge's addon (benchmarks/proxy.py).
Loading forge's addon as an object, not as a ``-s`` script, also means it is never re-imported when the
file changes on disk (mitmdump's script loader did that and forgot the registered rollouts).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import logging
import os
import signal
import sys
from collections.abc import Sequence

from mitmproxy import exceptions, master, options
from mitmproxy.addons import core, disable_h2c, errorcheck, next_layer, proxyserver, tlsconfig

from forge_cli.proxy.addon import ForgeProxy


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="forge-proxy", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", required=True, help="mitmproxy mode spec, e.g. reverse:http://127.0.0.1:8000@127.0.0.1:8800")
    ap.add_argument("--set", dest="setoptions", action="append", default=[], metavar="KEY=VALUE",
                    help="a mitmproxy or forge option (forge_upstreams, forge_store, body_size_limit, ...)")
    ap.add_argument("--core-only", action="store_true",
                    help="without forge's addon: the same proxy core as a plain reverse proxy (a benchmark baseline)")
    return ap


def build_master(opts: options.Options, with_forge: bool = True) -> master.Master:
    """A master holding the proxy core addons and forge's addon (call inside a running event loop)."""
    m = master.Master(opts, with_termlog=True)
    m.addons.add(core.Core(), proxyserver.Proxyserver(), next_layer.NextLayer(), tlsconfig.TlsConfig(),
                 disable_h2c.DisableH2C(), errorcheck.ErrorCheck(repeat_errors_on_stderr=True))
    if with_forge:
        m.addons.add(ForgeProxy())
    return m


async def _run(args: argparse.Namespace) -> int:
    logging.getLogger().setLevel(logging.INFO)
    for noisy in ("asyncio", "hpack", "quic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    opts = options.Options()
    m = build_master(opts, with_forge=not args.core_only)
    try:
        opts.set(*args.setoptions)
        opts.update(mode=[args.mode])
    except exceptions.OptionsError as exc:
        print(f"forge proxy: {exc}", file=sys.stderr)
        return 2
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):  # installed explicitly: a background job inherits SIGINT ignored
        loop.add_signal_handler(sig, m.shutdown)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    await m.run()  # errors logged during start-up exit 1 (mitmproxy's errorcheck addon)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``--mode``/``--set`` and serve until SIGINT/SIGTERM.

    ``FORGE_PROXY_PROFILE=out.prof`` in the environment writes a cProfile of the whole run on exit.
    """
    args = _parser().parse_args(argv)
    profile_path = os.environ.get("FORGE_PROXY_PROFILE")
    if not profile_path:
        return asyncio.run(_run(args))
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        return asyncio.run(_run(args))
    finally:
        profiler.disable()
        profiler.dump_stats(profile_path)


if __name__ == "__main__":
    raise SystemExit(main())
