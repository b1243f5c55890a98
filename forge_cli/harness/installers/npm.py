"""``manager: npm``: the pinned packages installed with npm (``forge_cli/harness/npm.py``) on the pinned Node runtime
(``forge_cli/harness/node_runtime.py``), which a ``runtime: node`` harness's bundle carries in ``node/``."""

from __future__ import annotations

from pathlib import Path

from forge_cli.config.schema import HarnessConfig
from forge_cli.errors import UserError
from forge_cli.harness import node_runtime, npm
from forge_cli.harness.installer import NATIVE_WRAPPER, Installed, Installer, Progress, write_wrapper
from forge_cli.harness.proc import is_elf

NODE_ENV = '''\
PATH="$d/../node/bin:$PATH"
LD_LIBRARY_PATH="$d/../node/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH LD_LIBRARY_PATH
'''

NODE_WRAPPER = '''\
#!/bin/sh
# forge bundle {harness}: {spec} on the bundle's own Node {node}; paths are relative to this script
d=$(dirname "$0")
{node_env}exec "$d/../node/bin/node" "$d/../{target}" "$@"
'''


def _wrapper(harness: HarnessConfig, tmp: Path, node_version: str | None) -> Path:
    """``bin/<entrypoint>``: the package's program on the bundle's Node (or, for a native program, directly)."""
    target = npm.entry_target(harness, tmp / "lib")
    rel = target.relative_to(tmp.resolve()).as_posix()
    spec = " ".join(npm.specs(harness))
    if is_elf(target):
        path_line = NODE_ENV if node_version else ""
        text = NATIVE_WRAPPER.format(harness=harness.name, spec=spec, target=rel, path_line=path_line)
    elif node_version is None:
        raise UserError(f"{harness.name}: {rel} is a JavaScript program but the harness's runtime is "
                        f"'{harness.runtime}'", fix=f"set runtime: node in configs/harness/{harness.name}.yaml")
    else:
        text = NODE_WRAPPER.format(harness=harness.name, spec=spec, node=node_version, target=rel, node_env=NODE_ENV)
    write_wrapper(tmp / "bin" / harness.entrypoint, text)
    return target


class NpmInstaller(Installer, manager="npm"):
    """npm packages from the npm registry (its cache in ``$FORGE_HOME/cache/npm`` serves ``--offline``)."""

    def install(self, bundle: Path, *, offline: bool, binary_path: Path | None, log: Path,
                say: Progress) -> Installed:
        harness = self.harness
        say("fetching the pinned Node runtime")
        node = node_runtime.ensure_node(offline=offline, log=log)
        if not node_runtime.satisfies(node.version, harness.node_min):
            raise UserError(f"{harness.name} needs Node >= {harness.node_min}; forge pins {node.version}",
                            fix="raise NODE_VERSION in forge_cli/harness/node_runtime.py")
        out = Installed()
        node_version = None
        if harness.runtime == "node":
            out.key_files += node_runtime.link_into(node, bundle)
            node_version = node.version
            out.manifest["node"] = {"package": node_runtime.NODE_PACKAGE, "version": node.version,
                                    "tarball": node.tarball.name, "tarball_sha256": node.tarball_sha256,
                                    "host_libs": node.libs}
        say(f"installing {' '.join(npm.specs(harness))} with npm" + (" (offline)" if offline else ""))
        npm.install(harness, bundle / "lib", node, offline=offline, log=log)
        out.key_files.append(_wrapper(harness, bundle, node_version))
        out.manifest["packages"] = npm.installed_packages(bundle / "lib")
        out.manifest["artifacts"] = npm.artifacts(harness, bundle / "lib")
        return out
