"""What it costs per model call to split forge's proxy addon into several mitmproxy addons.

    .venv/bin/python benchmarks/addon_dispatch.py [--calls 20000] [--rounds 5]

mitmproxy calls every hook on every addon (``AddonManager.trigger_event``: for each addon in the chain, a lookup
of the hook by name and a guarded call, then the same again for the ``update`` hook after each flow hook). This
runs the hooks one non-streamed call goes through (client_connected, requestheaders, request, responseheaders,
response, client_disconnected) through mitmproxy's own addon manager, with hooks that do nothing, in two layouts:

* ``one``: one addon owning every hook (forge's layout: ``forge_cli/proxy/addon.py`` delegates to its modules);
* ``split``: one addon per module (routing, control, upstream, recording, transport), each with the hooks that
  module needs.

It prints microseconds per call for each, their difference (what the split would add per call) and that
difference as a share of forge's measured proxy CPU per call (``--proxy-cpu-us``, from ``benchmarks/proxy.py``:
the forge row's cpu/req at 16 connections). Runs itself in mitmproxy's own environment.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

HOOKS = {  # the hooks each module of forge's proxy needs (addon.py's hook methods, by module)
    "routing": ("requestheaders", "request"),
    "control": ("requestheaders", "request"),
    "upstream": ("request", "responseheaders", "response", "error"),
    "recording": ("responseheaders", "response", "error"),
    "transport": ("client_connected", "client_disconnected", "requestheaders", "request", "response", "error"),
}


def _addon(name: str, hooks: tuple[str, ...]) -> Any:
    def noop(self: Any, *args: Any) -> None:
        return None

    return type(name, (), {h: noop for h in hooks})()


def _in_mitmproxy_env() -> None:
    try:
        import mitmproxy  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(ROOT))
        from forge_cli.proxy.launcher import mitmdump_path

        python = mitmdump_path().parent / "python"
        os.execv(str(python), [str(python), __file__, *sys.argv[1:]])


async def _per_call_us(addons: list[Any], calls: int) -> float:
    from mitmproxy import options
    from mitmproxy.addonmanager import AddonManager
    from mitmproxy.master import Master
    from mitmproxy.proxy import server_hooks
    from mitmproxy.proxy.layers.http import _hooks as http_hooks  # a benchmark may; forge_cli/proxy may not
    from mitmproxy.test import tflow

    master = Master(options.Options(), event_loop=asyncio.get_running_loop())
    manager: AddonManager = master.addons
    manager.add(*addons)
    flow = tflow.tflow(resp=True)
    events = [server_hooks.ClientConnectedHook(flow.client_conn), http_hooks.HttpRequestHeadersHook(flow),
              http_hooks.HttpRequestHook(flow), http_hooks.HttpResponseHeadersHook(flow),
              http_hooks.HttpResponseHook(flow), server_hooks.ClientDisconnectedHook(flow.client_conn)]
    for event in events * 200:  # warm-up
        await manager.handle_lifecycle(event)
    started = time.perf_counter()
    for _ in range(calls):
        for event in events:
            await manager.handle_lifecycle(event)
    return (time.perf_counter() - started) / calls * 1e6


async def _main(args: argparse.Namespace) -> None:
    one = [_addon("ForgeProxy", tuple(sorted({h for hooks in HOOKS.values() for h in hooks})))]
    split = [_addon(name.title(), hooks) for name, hooks in HOOKS.items()]
    results: dict[str, list[float]] = {"one": [], "split": []}
    for _ in range(args.rounds):  # alternating: the machine's load hits both alike
        results["one"].append(await _per_call_us(one, args.calls))
        results["split"].append(await _per_call_us(split, args.calls))
    med = {k: statistics.median(v) for k, v in results.items()}
    added = med["split"] - med["one"]
    print(f"hook dispatch per call, median of {args.rounds} rounds of {args.calls} calls (mitmproxy's addon manager, "
          "hooks that do nothing):")
    print(f"  one addon              {med['one']:7.1f} us/call")
    print(f"  {len(split)} addons (split)       {med['split']:7.1f} us/call")
    print(f"  the split adds         {added:7.1f} us/call = {added / args.proxy_cpu_us:.1%} of forge's proxy CPU per "
          f"call ({args.proxy_cpu_us:g} us, benchmarks/proxy.py at 16 connections)")
    print("choice: one addon delegating to modules" if added > 0.01 * args.proxy_cpu_us
          else "choice: either (the split costs under 1% of a call)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--proxy-cpu-us", type=float, default=1640.0,
                    help="forge's proxy CPU per call in microseconds (benchmarks/proxy.py, forge row, 16 connections)")
    args = ap.parse_args()
    _in_mitmproxy_env()
    asyncio.run(_main(args))


if __name__ == "__main__":
    main()
