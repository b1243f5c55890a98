"""Turn a harness config into one rollout's invocation: files, environment and argv."""

from __future__ import annotations

from dataclasses import dataclass

from forge_cli.config.schema import HarnessConfig, ModelConfig
from forge_cli.harness.templates import render

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


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


@dataclass(frozen=True)
class Invocation:
    """Everything the sandbox needs to run the harness once."""

    files: dict[str, str]
    env: dict[str, str]
    argv: list[str]
    timeout_s: int


def template_values(harness: HarnessConfig, model: ModelConfig, ctx: RolloutContext) -> dict[str, str]:
    root = f"{ctx.proxy_url.rstrip('/')}/r/{ctx.rollout_id}"
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
    return Invocation(files=files, env=env, argv=argv, timeout_s=harness.timeout_s)
