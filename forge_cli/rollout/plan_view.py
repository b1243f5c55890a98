"""Print a rollout plan for people (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.rule import Rule
from rich.syntax import Syntax

from forge_cli.rollout.plan import Plan


def _lexer(path: str) -> str:
    for suffix, lexer in ((".toml", "toml"), (".json5", "javascript"), (".json", "json"), (".yaml", "yaml"),
                          (".md", "markdown"), (".py", "python")):
        if path.endswith(suffix):
            return lexer
    return "text"


def show(plan: Plan, console: Console | None = None) -> None:
    console = console or Console(highlight=False)
    out = console.print
    out(Rule(f"[bold]forge rollout plan[/] - run {plan.run_id} (dry run: nothing started)"))
    out("  " + "  ".join(f"{k}=[bold]{v}[/]" for k, v in plan.choices.items()))
    out(f"  tasks: {plan.num_tasks} ({plan.tasks['source']})")
    out(f"  rollouts: {plan.num_rollouts} = {plan.num_tasks} tasks x {plan.samples_per_task} samples, "
        f"{plan.concurrency} in flight")
    out(f"  policy server (upstream): {plan.upstream}")
    out(f"  capture proxy: {plan.proxy}")
    out(f"  sampling enforced on every call: {plan.sampling or 'none (each harness its own)'}", markup=False)
    for warning in plan.warnings:
        out(f"  [yellow]warning:[/] {warning}", markup=True)
    for r in plan.rollouts:
        out(Rule(f"rollout {r.rollout_id} (task {r.task_id})"))
        out(f"  instruction: {r.instruction}", markup=False)
        out(f"  verifier (hidden from the harness): {r.verifier or 'none'}", markup=False)
        out(f"  proxy base URL: {r.proxy_base_url}")
        if r.tools:
            how = "over MCP" if r.tools["via"] == "mcp" else "as a skill file (HTTP calls)"
            out(f"  task tools: {', '.join(r.tools['tools'])} {how} at {r.tools['endpoint']} "
                f"(tool server {r.tools['server']}; dispatches in {r.tools['log']})", markup=False)
            desk = r.tools.get("desktop")
            if desk:
                screen = "x".join(str(n) for n in desk.get("screen") or [])
                out(f"  desktop: its own container from {desk['image']} (screen {screen}), observation "
                    f"{desk['observation']} (accessibility tree cut at ~{desk['a11y_max_tokens']} tokens); set up and "
                    "scored by OSWorld's desktop_env", markup=False)
        b = r.bundle
        out(f"  harness bundle: {b['package']} at {b['host_path']} -> {b['mounted_at']} "
            f"({'installed' if b['installed'] else 'not installed'})", markup=False)
        sandbox = r.sandbox
        out(f"  sandbox ({sandbox['kind']}):")
        if sandbox["kind"] == "docker":
            out(Syntax(sandbox["docker_run"], "bash", word_wrap=True))
            out(Syntax(sandbox["exec"], "bash", word_wrap=True))
        elif sandbox["kind"] == "kubernetes":
            out(f"  context: {sandbox['context']}")
            out("  images the cluster pulls:")
            for role, image in sandbox["images"].items():
                out(f"    {role}: {image}", markup=False)
            out(f"  pod security: {sandbox['pod_security']}", markup=False)
            out(Syntax(sandbox["manifests"], "yaml"))
        else:
            out(Syntax(sandbox["command"], "bash", word_wrap=True))
            out(f"  {sandbox['note']}", markup=False)
        for path, content in r.config_files.items():
            out(f"  config file {path}:", markup=False)
            out(Syntax(content.rstrip(), _lexer(path), word_wrap=True))
        out("  command:", end=" ")
        out(r.command_line, markup=False)
        out("  env:")
        for key, value in r.env.items():
            out(f"    {key}={value}", markup=False)
        out("  timeouts: " + ", ".join(f"{k}={v}" for k, v in r.timeouts.items()))
        out("  resources: " + ", ".join(f"{k}={v}" for k, v in r.resources.items()))
