"""Loading a shipped runtime option (configs/runtime/<kind>.yaml) with a few command-line overrides."""

from __future__ import annotations

from typing import Any

from forge_cli.errors import UserError


def load_runtime(kind: str, **overrides: Any) -> Any:
    """The runtime config of ``kind`` from the shipped YAML, with the non-None ``overrides`` applied."""
    import yaml
    from pydantic import ValidationError

    from forge_cli.config.runtimes import RUNTIMES
    from forge_cli.paths import configs_dir

    path = configs_dir() / "runtime" / f"{kind}.yaml"
    if not path.is_file():
        raise UserError(f"unknown runtime '{kind}'", f"use one of: {', '.join(RUNTIMES.names())}", exit_code=2)
    data = yaml.safe_load(path.read_text()) or {}
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return RUNTIMES.get(kind).model_validate(data)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        raise UserError(f"invalid {kind} runtime settings: {problems}", exit_code=2) from None
