"""Turn a harness config into one rollout's invocation: files, environment and argv."""

from __future__ import annotations

from dataclasses import dataclass

from forge_cli.config.schema import HarnessConfig, ModelConfig
from forge_cli.harness.templates import render
from forge_cli.tools.skill import skill_files
from forge_cli.tools.spec import SessionBackendSpec, ToolSpec

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class ToolsContext:
    """A task's tools as this rollout reaches them at the tool server."""

    tools: tuple[ToolSpec, ...]
    # http://<tool server>/r/<rollout-id>
    url: str
    key: str


@dataclass(frozen=True)
class RolloutContext:
    """Where and for whom a harness runs: one rollout in one sandbox."""

    rollout_id: str
    # the proxy as sandboxes reach it, e.g. http://127.0.0.1:8800
    proxy_url: str
    api_key: str
    instruction: str
    workdir: str
    home: str
    bundle: str
    # the task's tools (None: the task has none, nothing tool-related is rendered)
    tools: ToolsContext | None = None
    # the rollout's browser's DevTools endpoint when the harness drives it with its own browser tool
    # (harness.browser: native); None: no browser, or forge's browser tools
    browser_cdp_url: str | None = None


@dataclass(frozen=True)
class Invocation:
    """Everything the sandbox needs to run the harness once."""

    files: dict[str, str]
    env: dict[str, str]
    argv: list[str]
    timeout_s: int


def harness_tools(harness: HarnessConfig, tools: tuple[ToolSpec, ...]) -> tuple[tuple[ToolSpec, ...], bool]:
    """The task tools the harness is given, and whether it drives the rollout's browser with its own browser tool
    (``harness.browser: native`` and a task with browser tools: those are left out, the rest stay)."""
    browser = [t for t in tools if isinstance(t.backend, SessionBackendSpec) and t.backend.kind == "browser"]
    if not browser or harness.browser != "native":
        return tools, False
    return tuple(t for t in tools if t not in browser), True


def template_values(harness: HarnessConfig, model: ModelConfig, ctx: RolloutContext) -> dict[str, str]:
    root = f"{ctx.proxy_url.rstrip('/')}/r/{ctx.rollout_id}"
    values = _base_values(model, ctx, root)
    if ctx.tools is not None:
        values.update(tools_url=ctx.tools.url, mcp_url=f"{ctx.tools.url}/mcp", tools_key=ctx.tools.key)
        values["skill_dir"] = render(harness.tools.skill_dir, values)
        if harness.tools.via == "skill":
            values["instruction"] += render(harness.tools.instruction_suffix, values)
    if ctx.browser_cdp_url is not None:
        values["browser_cdp_url"] = ctx.browser_cdp_url
    return values


def _base_values(model: ModelConfig, ctx: RolloutContext, root: str) -> dict[str, str]:
    return {
        "base_url": f"{root}/v1",
        "base_url_root": root,
        "api_key": ctx.api_key,
        "model": model.served_name,
        "context_window": str(model.max_model_len),
        "max_output_tokens": str(model.max_output_tokens),
        "instruction": ctx.instruction,
        "workdir": ctx.workdir,
        "home": ctx.home,
        "bundle": ctx.bundle,
        "rollout_id": ctx.rollout_id,
    }


def prepare(harness: HarnessConfig, model: ModelConfig, ctx: RolloutContext) -> Invocation:
    """Render the harness's config files, env vars and one-shot command for this rollout."""
    values = template_values(harness, model, ctx)
    files = {render(f.path, values): render(f.template, values) for f in harness.config_files}
    env = {
        "HOME": ctx.home,
        "PATH": f"{ctx.bundle}/bin:{SYSTEM_PATH}",
        "LANG": "C.UTF-8",
        **{key: render(value, values) for key, value in harness.env.items()},
    }
    argv = [render(arg, values) for arg in harness.command]
    if ctx.tools is not None:
        spec = harness.tools
        # the tools' own files win over the harness's file at the same path (e.g. a settings.json with MCP added)
        files.update({render(f.path, values): render(f.template, values) for f in spec.config_files})
        env.update({key: render(value, values) for key, value in spec.env.items()})
        argv[1:1] = [render(arg, values) for arg in spec.args]
        if spec.via == "skill":
            files.update(skill_files(ctx.tools.tools, ctx.tools.url, ctx.tools.key, values["skill_dir"]))
    if ctx.browser_cdp_url is not None and harness.native_browser is not None:
        native = harness.native_browser
        files.update({render(f.path, values): render(f.template, values) for f in native.config_files})
        env.update({key: render(value, values) for key, value in native.env.items()})
    return Invocation(files=files, env=env, argv=argv, timeout_s=harness.timeout_s)
