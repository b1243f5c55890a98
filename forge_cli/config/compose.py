"""Compose an experiment from ``configs/`` with Hydra's compose API, then validate it.

Every problem found is collected and raised at once as a :class:`ConfigError` (exit 2): malformed
overrides, unknown group options (with near-miss suggestions), config files that are not valid YAML
(file, line and column), composition failures, missing required values and type errors, each naming
the key, the bad value and what is allowed.

A task source's own options are not checked here: ``config`` imports no task source. The step above it that does
(``forge_cli.envs.resolve.compose_resolved``, what every command composes with) passes ``resolve``, whose problems
are reported with these.
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forge_cli.config.runtimes import RUNTIMES, RuntimeOptions
from forge_cli.config.schema import GROUPS, Experiment
from forge_cli.config.training import TrainerConfig, trainer_options
from forge_cli.errors import ConfigError
from forge_cli.paths import configs_dir

PRIMARY = "experiment"
MISSING = "???"

# a layer above config given the composed dict before it is validated: the dict to validate instead, and problems of
# its own (each "group: what is wrong"), reported with the schema's
Resolve = Callable[[dict[str, Any]], tuple[dict[str, Any], list[str]]]


@dataclass(frozen=True)
class Composed:
    """A validated experiment plus the plain dict it came from (for ``config show``)."""

    experiment: Experiment
    data: dict[str, Any]
    overrides: tuple[str, ...]


def search_dirs(config_dir: Path | None = None) -> list[Path]:
    """Directories holding config groups: the shipped ones, then the user's ``--config-dir``."""
    dirs = [configs_dir()]
    if config_dir is not None:
        path = Path(config_dir).expanduser()
        if not path.is_dir():
            raise ConfigError([f"--config-dir {config_dir}: no such directory"])
        dirs.append(path.resolve())
    return dirs


def group_options(config_dir: Path | None = None) -> dict[str, dict[str, Path]]:
    """Every option of every group: ``{group: {option: yaml path}}`` (shipped options win)."""
    found: dict[str, dict[str, Path]] = {group: {} for group in GROUPS}
    for directory in search_dirs(config_dir):
        for group in GROUPS:
            for path in sorted((directory / group).glob("*.yaml")):
                found[group].setdefault(path.stem, path)
    return found


def describe(path: Path) -> str:
    """The option's one-line description: its ``description:`` field."""
    for line in path.read_text().splitlines():
        if line.startswith("description:"):
            return line.split(":", 1)[1].strip().strip("\"'")
    return ""


def _normalise(overrides: list[str], options: dict[str, dict[str, Path]]) -> tuple[list[str], list[str]]:
    """Parse overrides; turn ``+group=x`` into ``group=x``; check group options exist."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    problems: list[str] = []
    out: list[str] = []
    for text in overrides:
        try:
            (parsed,) = parser.parse_overrides([text])
        except HydraException as exc:
            first = str(exc).strip().splitlines()[0]
            problems.append(
                f"'{text}': malformed override ({first}); write key=value, group=option or +key=value"
            )
            continue
        key = parsed.key_or_group
        if key in options and parsed.package is None:
            value = parsed.value()
            if not isinstance(value, str):
                problems.append(f"{key}: '{parsed.get_value_element_as_str()}' is not an option name; "
                                f"available: {', '.join(sorted(options[key]))}")
                continue
            if value not in options[key]:
                near = difflib.get_close_matches(value, list(options[key]), n=1, cutoff=0.6)
                hint = f"did you mean '{near[0]}'? " if near else ""
                problems.append(f"{key}: unknown option '{value}'; {hint}available: "
                                f"{', '.join(sorted(options[key]))}")
                continue
            out.append(f"{key}={value}")
        else:
            out.append(text)
    return out, problems


def _check_keys(cfg: Any, overrides: list[str]) -> tuple[list[str], list[str]]:
    """Find every plain ``key=value`` whose key is not in the config; let ``+key=`` set existing keys."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    problems, out = [], []
    for text, parsed in zip(overrides, OverridesParser.create().parse_overrides(overrides), strict=True):
        key = parsed.key_or_group
        if key.startswith("hydra.") or "." not in key:
            out.append(text)
            continue
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(cfg, parent, throw_on_missing=False)
        # `in` on a DictConfig is False for keys whose value is ??? (missing); keys() lists them too
        exists = node is not None and OmegaConf.is_dict(node) and leaf in node.keys()  # noqa: SIM118
        if exists and parsed.is_add():
            out.append(text.lstrip("+"))  # `+key=value` on a key that exists: set it, as users mean
        elif exists or parsed.is_add() or parsed.is_force_add():
            out.append(text)
        elif node is not None and OmegaConf.is_dict(node) and _schema_has(cfg, key):
            out.append("+" + text)  # a setting the schema has but the option's YAML leaves at its default
        elif node is not None and OmegaConf.is_dict(node) and parent.split(".")[:2] == list(FREE_FORM):
            out.append("+" + text)  # a source's own option: its Options model checks the key
        else:
            near = []
            if node is not None and OmegaConf.is_dict(node):
                keys = [str(k) for k in node.keys()]  # noqa: SIM118
                near = difflib.get_close_matches(leaf, keys, n=1, cutoff=0.6)
            hint = f"did you mean '{parent}.{near[0]}'? " if near else ""
            if node is None and _schema_has(cfg, key):  # inside a group that is null (trainer.lora)
                problems.append(f"{key}: {parent} is null; set it as a whole, e.g. {parent}='{{{leaf}:VALUE}}'")
                continue
            problems.append(f"{key}: no such setting; {hint}(`forge config show` lists them)")
    return problems, out


# keys whose value is a free-form mapping checked later by its owner (a task source's Options model)
FREE_FORM = ("env", "options")


# groups whose options class is registered by kind: the lookup from kind to class
_BY_KIND: dict[type, Callable[[str], type]] = {RuntimeOptions: RUNTIMES.get, TrainerConfig: trainer_options}


def _schema_has(cfg: Any, key: str) -> bool:
    """Whether ``key`` (a.b.c) is a field of the schema, in the variant ``cfg`` selects (runtime kind, model
    source)."""
    import typing

    from pydantic import BaseModel

    model: Any = Experiment
    path: list[str] = []
    for part in key.split("."):
        fields = getattr(model, "model_fields", {})
        if part not in fields:
            return False
        path.append(part)
        annotation = fields[part].annotation
        while typing.get_origin(annotation) is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        members = [m for m in typing.get_args(annotation) or (annotation,) if isinstance(m, type)
                   and issubclass(m, BaseModel)]
        if len(members) > 1:  # a discriminated union: the variant whose tag the composed config has
            discriminator = str(fields[part].discriminator)
            tag = cfg.get(path[0], {}).get(discriminator) if len(path) == 1 else None
            members = [m for m in members if tag in typing.get_args(m.model_fields[discriminator].annotation)]
        elif len(path) == 1 and members and members[0] in _BY_KIND:  # registered by kind: the class of cfg's kind
            with contextlib.suppress(ValueError):  # an unknown kind: validation names it
                members = [_BY_KIND[members[0]](str(cfg.get(path[0], {}).get("kind")))]
        model = members[0] if len(members) == 1 else None
    return True


def _missing(data: Any, prefix: str = "") -> list[str]:
    if isinstance(data, dict):
        return [m for k, v in data.items() for m in _missing(v, f"{prefix}{k}.")]
    if isinstance(data, list):
        return [m for i, v in enumerate(data) for m in _missing(v, f"{prefix}{i}.")]
    return [prefix[:-1]] if data == MISSING else []


def _pydantic_problems(exc: Any, data: dict[str, Any]) -> list[str]:
    problems = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        # a discriminated union adds the tag as a path element: runtime.docker.resources → runtime.resources
        for group, tag in (("runtime", "kind"), ("model", "source")):
            if len(loc) > 1 and loc[0] == group and loc[1] == str(data.get(group, {}).get(tag)):
                del loc[1]
        key = ".".join(loc)
        if err["type"] == "union_tag_invalid":
            ctx = err.get("ctx", {})
            tag = str(ctx.get("discriminator", "")).strip("'")
            problems.append(f"{key}.{tag}: {ctx.get('tag')!r} is not allowed: expected one of "
                            f"{ctx.get('expected_tags')}")
        elif err["type"] == "extra_forbidden":
            problems.append(f"{key}: unknown setting (value {_short(err['input'])}); check the spelling")
        elif err["type"] == "missing":
            problems.append(f"{key}: missing required value")
        else:
            msg = str(err["msg"]).removeprefix("Value error, ")
            if isinstance(err["input"], dict) and err["type"] == "value_error":  # a check of the whole group
                problems.append(f"{key}: {msg}")
            else:
                problems.append(f"{key}: {_short(err['input'])} is not allowed: {msg}")
    return problems


def _short(value: Any, limit: int = 200) -> str:
    """``repr(value)``, cut to ``limit`` characters (a huge value stays one readable line)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _yaml_problem(exc: Any) -> str:
    """A YAML syntax error in a config file as ``FILE:LINE:COLUMN: invalid YAML: what (while what, where)``."""
    context_mark = getattr(exc, "context_mark", None)
    where = getattr(exc, "problem_mark", None) or context_mark
    if where is None:
        return f"a config file is not valid YAML: {' '.join(str(exc).split())}"
    problem, context = getattr(exc, "problem", None), getattr(exc, "context", None)
    text = problem or context or "syntax error"
    if problem and context:
        started = ""
        if context_mark is not None and (context_mark.line, context_mark.column) != (where.line, where.column):
            started = f" at line {context_mark.line + 1}, column {context_mark.column + 1}"
        text += f" ({context}{started})"
    return f"{where.name}:{where.line + 1}:{where.column + 1}: invalid YAML: {text}"


def compose(overrides: list[str] | tuple[str, ...] = (), config_dir: Path | None = None,
            resolve: Resolve | None = None) -> Composed:
    """Compose ``experiment.yaml`` with ``overrides`` and validate it into an :class:`Experiment` (what ``resolve``
    makes of the composed dict, when given; ``Composed.data`` stays the composed dict)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException
    from pydantic import ValidationError
    from yaml import YAMLError

    options = group_options(config_dir)
    normalised, problems = _normalise(list(overrides), options)
    if problems:
        raise ConfigError(problems)
    extra = [d for d in search_dirs(config_dir)[1:]]
    if extra:
        normalised.append("hydra.searchpath=[" + ",".join(f"file://{d}" for d in extra) + "]")
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(configs_dir()), version_base=None):
            groups_only = [o for o in normalised if o.split("=", 1)[0].lstrip("+") in options
                           or o.startswith("hydra.")]
            if len(groups_only) < len(normalised):  # value overrides: check their keys exist first
                base = hydra_compose(config_name=PRIMARY, overrides=groups_only)
                problems, normalised = _check_keys(base, normalised)
                if problems:
                    raise ConfigError(problems)
            cfg = hydra_compose(config_name=PRIMARY, overrides=normalised)
        raw = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
    except (HydraException, OmegaConfBaseException) as exc:
        message = " ".join(str(exc).split())
        cause = exc.__cause__
        if isinstance(cause, OmegaConfBaseException):  # "Error merging override k=v" says no more than that
            message += f" ({str(cause).strip().splitlines()[0]})"
        raise ConfigError([message]) from None
    except YAMLError as exc:  # a group file that does not parse (Hydra lets PyYAML's error through)
        raise ConfigError([_yaml_problem(exc)]) from None
    finally:
        GlobalHydra.instance().clear()
    assert isinstance(raw, dict)
    data: dict[str, Any] = {str(k): v for k, v in raw.items()}
    problems = [f"{key}: missing required value (set it with {key}=...)" for key in _missing(data)]
    validated, resolved = resolve(data) if resolve is not None else (data, [])
    try:
        experiment = Experiment.model_validate(validated)
    except ValidationError as exc:
        missing = set(_missing(data))
        problems += [p for p in _pydantic_problems(exc, data) if p.split(":")[0] not in missing]
    problems += resolved
    if problems:
        raise ConfigError(problems)
    experiment = _context_as_meant(experiment, data, normalised)
    return Composed(experiment=experiment, data=data, overrides=tuple(overrides))


def _context_as_meant(experiment: Experiment, data: dict[str, Any], overrides: list[str]) -> Experiment:
    """A ``model.max_model_len`` the user gives on the command line is taken as meant: ``model.auto_context`` (on
    by default, which raises the served context to fit the harness's first prompt) is turned off for that run
    unless the user gives it too, so a context too small for the harness is refused with the fix instead of being
    silently changed. ``data`` (what the run directory stores) is kept in step."""
    keys = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
    model = experiment.model
    if ("model.max_model_len" not in keys or "model.auto_context" in keys
            or not getattr(model, "auto_context", False)):
        return experiment
    model_data = data.get("model")
    if isinstance(model_data, dict):
        model_data["auto_context"] = False
    return experiment.model_copy(update={"model": model.model_copy(update={"auto_context": False})})
