"""What every browser env checks before a run: a runtime its browsers can run beside, Chromium, @playwright/mcp."""

from __future__ import annotations

from collections.abc import Callable

from forge_cli.browser import playwright_mcp
from forge_cli.browser.chromium import chromium_path
from forge_cli.errors import UserError


def check_browser_runtime(env_name: str, runtime_kind: str) -> None:
    """UserError exit 2 on Kubernetes: no browser beside an in-cluster tool server yet."""
    if runtime_kind == "kubernetes":
        raise UserError(f"env={env_name} runs each rollout's browser beside forge's tool server, which a Kubernetes "
                        "run does not have yet", fix="use runtime=local or runtime=docker", exit_code=2)


def ensure_browser(env_name: str, runtime_kind: str, log: Callable[[str], None]) -> None:
    """UserError exit 2 on Kubernetes (``check_browser_runtime``), exit 1 without Chromium; installs the pinned
    @playwright/mcp when it is missing (exit 1 when npm cannot)."""
    check_browser_runtime(env_name, runtime_kind)

    chromium_path()
    if playwright_mcp.manifest() is None:
        log(f"installing {playwright_mcp.PACKAGE}@{playwright_mcp.VERSION} (the browser tools) ...")
    playwright_mcp.ensure_installed()
