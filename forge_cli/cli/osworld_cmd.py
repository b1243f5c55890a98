"""``forge osworld tasks|fetch``: which OSWorld tasks forge can run here and why not the others; fetch task files
into the cache on a machine with network, so that another machine runs the tasks offline."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import typer

from forge_cli.cli.common import ConfigDir, JsonFlag, Overrides

app = typer.Typer(help="OSWorld's tasks: list what runs here (and why not the rest), fetch task files into the "
                       "cache.", no_args_is_help=True)


def _source(overrides: list[str] | None, config_dir: Path | None) -> Any:
    from forge_cli.cli.common import load
    from forge_cli.envs.source import open_source
    from forge_cli.errors import UserError

    exp = load(["+env=osworld", *[o for o in overrides or [] if not o.lstrip("+").startswith("env=")]],
               config_dir).experiment
    if exp.env.source != "osworld":
        raise UserError("forge osworld works on env=osworld", exit_code=2)
    return open_source(exp.env)


@app.command("tasks")
def tasks(overrides: Overrides = None, config_dir: ConfigDir = None, as_json: JsonFlag = False) -> None:
    """List the split's tasks forge can run here and, for each one left out, why (files neither cached nor allowed
    from the network, apps the desktop lacks, logins, ...).

    Examples: forge osworld tasks env.path=~/OSWorld | forge osworld tasks env.path=~/OSWorld env.split=test_small
    """
    source = _source(overrides, config_dir)
    split = source.env.split or source.default_split("eval")
    runnable = source.load(split)
    if as_json:
        typer.echo(json.dumps({"split": split, "runnable": [t.id for t in runnable], "left_out": source.left_out},
                              indent=2))
        return
    typer.echo(f"split {split} of {source.root}: {len(runnable)} runnable, {len(source.left_out)} left out "
               f"(cache {source.cache_dir}, network {'allowed' if source.options.network else 'off'})")
    for task in runnable:
        typer.echo(f"  run   {task.category}/{task.id}")
    for task_id, why in source.left_out.items():
        typer.echo(f"  skip  {task_id}: {why}")


@app.command("fetch")
def fetch(overrides: Overrides = None, config_dir: ConfigDir = None) -> None:
    """Download every file the split's tasks need (setup inputs, gold files) into the cache (env.options.cache_dir),
    with OSWorld's own download code, on a machine that has network; a machine without network then runs them.

    Example: forge osworld fetch env.path=~/OSWorld env.options.cache_dir=/data/osworld-cache
    """
    from forge_cli.desktop.osworld_env import HOST_RUNNER, osworld_python
    from forge_cli.envs.osworld.needs import task_urls

    source = _source([*(overrides or []), "env.options.network=true"], config_dir)
    python = osworld_python()
    split = source.env.split or source.default_split("eval")
    tasks = source.load(split)
    cache = source.cache_dir
    cache.mkdir(parents=True, exist_ok=True)
    failed = 0
    for i, task in enumerate(tasks, 1):
        raw = task.tool_state["desktop"]["task"]
        if not task_urls(raw):
            continue
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            json.dump(raw, f)
            f.flush()
            done = subprocess.run([str(python), str(HOST_RUNNER), "fetch", "--task", f.name, "--cache-dir", str(cache)],
                                  capture_output=True, text=True)
        answer = _last_json(done.stdout)
        ok = done.returncode == 0 and bool(answer.get("ok"))
        failed += not ok
        why = str(answer.get("error") or done.stderr.strip()[-300:])
        typer.echo(f"[{i}/{len(tasks)}] {task.id}: {'fetched' if ok else 'FAILED ' + why}")
        sys.stdout.flush()
    typer.echo(f"cache {cache}: {len(tasks) - failed} of {len(tasks)} tasks have their files")
    if failed:
        raise typer.Exit(1)


def _last_json(text: str) -> dict[str, Any]:
    for line in reversed(text.splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return {}
