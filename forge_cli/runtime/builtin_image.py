"""The image the cluster path runs forge in (``forge image build --builtin controller``, tag ``forge:latest``):
the capture proxy's StatefulSet and the controller Job of ``forge k8s manifests`` (``runtime.proxy_image``).

It holds this checkout of forge (a wheel built from it, with the core dependencies) and forge's mitmproxy
environment, and runs as the non-root user ``forge`` (uid/gid 1000, HOME ``/home/forge``, ``FORGE_HOME`` under it) so
its pods meet the restricted Pod Security profile. The container build reaches Debian's archive but not PyPI, so the
wheels are built first on this machine with forge's pip (from its cache where it can) and copied in.
"""

from __future__ import annotations

from pathlib import Path

from forge_cli.errors import UserError
from forge_cli.runtime.images import BuiltinImage, Echo, build_wheels
from forge_cli.runtime.k8s_manifests import CONTROLLER_FORGE_HOME, CONTROLLER_HOME, CONTROLLER_UID

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
MITMPROXY_REQUIREMENTS = PACKAGE_ROOT / "scripts" / "requirements" / "mitmproxy.txt"

DOCKERFILE = f"""\
FROM forge-base:bookworm
RUN apt-get update && apt-get install -y --no-install-recommends python3-venv \\
 && rm -rf /var/lib/apt/lists/*
COPY wheels /tmp/wheels
ENV HOME={CONTROLLER_HOME} FORGE_HOME={CONTROLLER_FORGE_HOME} PATH=/opt/forge/venv/bin:$PATH \\
    PYTHONDONTWRITEBYTECODE=1 PIP_NO_CACHE_DIR=1
RUN python3 -m venv /opt/forge/venv \\
 && /opt/forge/venv/bin/pip install -q --no-index --find-links /tmp/wheels forge-rl \\
 && python3 -m venv $FORGE_HOME/envs/mitmproxy \\
 && $FORGE_HOME/envs/mitmproxy/bin/pip install -q --no-index --find-links /tmp/wheels -r /tmp/wheels/mitmproxy.txt \\
 && rm -rf /tmp/wheels \\
 && groupadd -g {CONTROLLER_UID} forge && useradd -u {CONTROLLER_UID} -g {CONTROLLER_UID} -d $HOME -M forge \\
 && mkdir -p $FORGE_HOME/harnesses && chown -R {CONTROLLER_UID}:{CONTROLLER_UID} $HOME \\
 && forge --help >/dev/null
USER {CONTROLLER_UID}:{CONTROLLER_UID}
WORKDIR {CONTROLLER_HOME}
"""


class ControllerImage(BuiltinImage, name="controller"):
    tag = "forge:latest"
    summary = ("forge and its mitmproxy environment as a non-root user: the in-cluster capture proxy and controller "
               "Job (runtime.proxy_image; 1-3 minutes, ~0.9 GB)")

    def prepare(self, context: Path, echo: Echo | None) -> Path:
        if not (PACKAGE_ROOT / "pyproject.toml").is_file() or not MITMPROXY_REQUIREMENTS.is_file():
            raise UserError(f"the controller image is built from a source checkout of forge; {PACKAGE_ROOT} is not one",
                            fix="git clone forge and run forge image build --builtin controller there", exit_code=2)
        wheels = context / "wheels"
        wheels.mkdir()
        build_wheels([str(PACKAGE_ROOT)], wheels, "forge (this checkout) and its dependencies", echo)
        build_wheels(["-r", str(MITMPROXY_REQUIREMENTS)], wheels, "forge's mitmproxy environment", echo)
        (wheels / "mitmproxy.txt").write_bytes(MITMPROXY_REQUIREMENTS.read_bytes())
        dockerfile = context / "Dockerfile"
        dockerfile.write_text(DOCKERFILE)
        return dockerfile
