"""Where each part of forge runs: the code that starts in another interpreter or another place than the ``forge``
process, with what that interpreter has.

Most of forge runs in the ``forge`` process (``.venv``). These modules do not: each is started in its own
interpreter, with its own packages, and may import only what that interpreter has. They live in
``forge_cli/remote/``, one subpackage per place (``mitmproxy/``, ``verl/``, ``osworld/``, ``sandbox/``, named as
``interpreter`` below), which nothing in the ``forge`` process imports: each is started by name or by path. The
desktop image's in-VM server stays in the image's build context (``desktop/image/server/``), which is where it runs.

``tests/test_entrypoints.py`` checks that the tree and this table agree, imports each in its real interpreter, with
the import path it really gets, wherever the test suite installs that interpreter; the ``forge_imports`` of each
are held by import contracts (``pyproject.toml``, ``lint-imports``) and checked against the package's import graph
by the same test. ``docs/architecture.md`` (the process map) says who starts each and when.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EntryPoint:
    """A module (or a file copied elsewhere) that starts a process outside forge's own interpreter."""

    # dotted module in forge_cli.remote.<place> (or, for code copied into an image, its path under forge_cli/)
    module: str
    # the interpreter that runs it: "env:<name>" (forge's environment ~/.cache/forge/envs/<name>), "sandbox"
    # (the sandbox image's python3, standard library only), "container:desktop" (the desktop image's python3)
    interpreter: str
    # where and how, in words
    runs: str
    # the forge packages (and leaf modules) it may import, directly or through others; empty: none of forge
    forge_imports: tuple[str, ...] = ()


ENTRY_POINTS: tuple[EntryPoint, ...] = (
    EntryPoint("forge_cli.remote.mitmproxy.main", "env:mitmproxy",
               "the capture proxy: mitmdump's master with forge's addon, one per proxy replica, started by the "
               "rollout session (proxy/launcher.py) with an import root of proxy/, traces/, plugins.py and "
               "remote/mitmproxy/ only",
               ("forge_cli.proxy", "forge_cli.traces", "forge_cli.plugins")),
    EntryPoint("forge_cli.remote.mitmproxy.writer", "env:mitmproxy",
               "the store writer: a child of the proxy, fed frames through a pipe; outlives a killed proxy",
               ("forge_cli.proxy", "forge_cli.traces", "forge_cli.plugins")),
    EntryPoint("forge_cli.remote.verl.agent_loop", "env:verl",
               "forge's agent loop inside veRL's Ray workers (trainer=verl): runs forge rollouts through the proxy; "
               "registered by its dotted path (train/verl/mapping.py; forge_cli.train.verl.agent_loop, the path "
               "earlier runs stored, is a deprecated alias of it)",
               ("forge_cli",)),
    EntryPoint("forge_cli.remote.verl.sampler", "env:verl",
               "forge's sampler in veRL's trainer process: veRL's sync replay buffer plus forge's rollout counters in "
               "each step's metrics; named by its module path in trainer.v1.sampler.custom_sampler "
               "(train/verl/mapping.py; forge_cli.train.verl.sampler, the path earlier runs stored, is an alias)",
               ("forge_cli",)),
    EntryPoint("forge_cli.remote.osworld.host_runner", "env:osworld",
               "OSWorld's own task setup and scoring (desktop_env), run by its path per step by the desktop tool "
               "session (desktop/osworld_env.py)",
               ()),
    EntryPoint("forge_cli.remote.sandbox.react_agent", "sandbox",
               "forge's react harness: copied into the harness bundle by its path (harness/installers/builtin.py), "
               "run by the sandbox's python3 (stdlib only)",
               ()),
    EntryPoint("desktop/image/server/server.py", "container:desktop",
               "the in-VM server of the desktop image (screenshots, pyautogui actions, the accessibility tree): "
               "copied into forge-desktop at build time (it stays in the image's build context, desktop/image/)", ()),
)
