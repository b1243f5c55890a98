"""Helpers of the bad-input suite (tests/cli/test_bad_input.py): the CLI run in-process, the config fields walked
from the typed schema (forge_cli/config/schema.py), Hydra override literals, and the one assertion every case
makes: one clear message on stderr, no traceback, forge's exit code (2: the user's input, 1: the machine)."""

from __future__ import annotations

import io
import os
import signal
import sys
import traceback
import types
import typing
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal, Union

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from forge_cli.config.runtimes import RUNTIMES, RuntimeOptions
from forge_cli.config.schema import Experiment

TRACEBACK = "Traceback (most recent call last)"


@dataclass(frozen=True)
class Outcome:
    """What a user sees: exit status, stdout, stderr (a Python traceback is printed into stderr as Python would)."""

    args: tuple[str, ...]
    code: int
    stdout: str
    stderr: str

    def __str__(self) -> str:
        return f"forge {' '.join(self.args)!r} -> exit {self.code}\nstdout: {self.stdout[-1500:]}\n" \
               f"stderr: {self.stderr[-3000:]}"


@contextmanager
def _environ(env: dict[str, str] | None) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.update({"COLUMNS": "200", **(env or {})})
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextmanager
def _time_limit(seconds: int) -> Iterator[None]:
    """A call that hangs (a plan of 10**18 rollouts, a server that starts after all) fails after ``seconds`` with a
    TimeoutError instead of blocking the suite; the signal handlers forge serve/proxy install are put back."""
    def expire(signum: int, frame: Any) -> None:
        raise TimeoutError(f"forge ran for {seconds} s")

    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def run_forge(*args: str, env: dict[str, str] | None = None, limit_s: int = 60) -> Outcome:
    """``forge ARGS`` through the real entry point (``forge_cli.cli.app.main``) in this process."""
    from forge_cli.cli.app import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    argv = sys.argv
    sys.argv = ["forge", *args]
    try:
        with _environ(env), _time_limit(limit_s), redirect_stdout(out), redirect_stderr(err):
            try:
                main()
            except SystemExit as exit_:
                status = exit_.code
                code = status if isinstance(status, int) else (0 if status is None else 1)
                if status is not None and not isinstance(status, int):
                    print(status, file=sys.stderr)
            except BaseException:  # what the interpreter would print: the bug this suite hunts
                traceback.print_exc(file=err)
                code = 1
    finally:
        sys.argv = argv
    return Outcome(tuple(args), code, out.getvalue(), err.getvalue())


def assert_clean(outcome: Outcome) -> None:
    """No traceback anywhere, and a failure says so on stderr."""
    assert TRACEBACK not in outcome.stderr + outcome.stdout, str(outcome)
    if outcome.code != 0:
        assert outcome.stderr.strip(), f"exit {outcome.code} with nothing on stderr\n{outcome}"


def assert_error(outcome: Outcome, code: int, *needles: str) -> None:
    """One clear message: exit ``code``, an ``error:``/usage message on stderr naming ``needles``, no traceback."""
    assert_clean(outcome)
    assert outcome.code == code, f"expected exit {code}\n{outcome}"
    text = outcome.stderr
    lines = text.splitlines()
    errors = [line for line in lines if line.startswith("error:")]
    usage = [line for line in lines if line.startswith("Usage:")]
    # one message: forge's own `error:` line, or click's usage error; progress lines before it are allowed
    assert len(errors) + len(usage) == 1, f"not one clear message\n{outcome}"
    for needle in needles:
        assert needle in text, f"{needle!r} not in stderr\n{outcome}"


# ------------------------------------------------------------------ the schema's fields
@dataclass(frozen=True)
class Field:
    """One settable leaf of the experiment: its dotted key, annotation, and the overrides that select its variant
    (``runtime=docker`` for ``runtime.network``) or wrap it (a list of models: ``env.services=[{...}]``)."""

    key: str
    annotation: Any
    info: FieldInfo
    select: tuple[str, ...] = ()
    # how the value reaches the config: "key" (key=value), "parent" (parent={leaf: value}: an optional model that
    # is null by default) or "item" (list=[{required..., leaf: value}]: a field of a list's items)
    via: Literal["key", "parent", "item"] = "key"
    container: str = ""
    required: tuple[tuple[str, Any], ...] = ()

    @property
    def leaf(self) -> str:
        return self.key.rpartition(".")[2]

    def override(self, value: Any) -> str:
        if self.via == "key":
            return f"{self.key}={hydra_literal(value)}"
        item = dict(self.required)
        item[self.leaf] = value
        payload = hydra_literal([item] if self.via == "item" else item)
        return f"{self.container}={payload}"

    @property
    def id(self) -> str:
        return "+".join([*self.select, self.key])


def unwrap(annotation: Any) -> list[Any]:
    """The members of a union (Optional included), else the annotation itself."""
    if typing.get_origin(annotation) is typing.Annotated:
        return unwrap(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (Union, types.UnionType):
        return [m for a in typing.get_args(annotation) for m in unwrap(a)]
    return [annotation]


def _model(annotation: Any) -> type[BaseModel] | None:
    models = [m for m in unwrap(annotation) if isinstance(m, type) and issubclass(m, BaseModel)]
    return models[0] if len(models) == 1 else None


@cache
def _options(group: str) -> dict[str, dict[str, Any]]:
    import yaml

    from forge_cli.paths import configs_dir

    return {p.stem: yaml.safe_load(p.read_text()) or {} for p in sorted((configs_dir() / group).glob("*.yaml"))}


def _variant_option(group: str, tag: str, value: str) -> str:
    """The shipped option of ``group`` whose ``tag`` is ``value`` (runtime kind docker: ``docker``)."""
    return next(name for name, data in _options(group).items() if data.get(tag) == value)


def _placeholder(annotation: Any) -> Any:
    """A valid value for a required field (a list's item needs its required fields)."""
    base = unwrap(annotation)[0]
    if typing.get_origin(base) is list:
        return ["x"]
    return "x"


def _walk(model: type[BaseModel], prefix: str, select: tuple[str, ...], optional_parent: str | None = None,
          list_parent: str | None = None) -> Iterator[Field]:
    for name, info in model.model_fields.items():
        key = f"{prefix}{name}"
        annotation = info.annotation
        members = unwrap(annotation)
        tags = [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]
        if tags == [RuntimeOptions]:  # registered by kind (config/runtimes.py): every registered variant
            tags = [RUNTIMES.get(kind) for kind in RUNTIMES.names()]
        if len(tags) > 1:  # a discriminated union: each variant's fields, with the option that selects it
            discriminator = str(info.discriminator or "kind")
            for variant in tags:
                tag = typing.get_args(variant.model_fields[discriminator].annotation)[0]
                option = _variant_option(name, discriminator, tag)
                yield from _walk(variant, f"{key}.", (*select, f"{name}={option}"))
            continue
        sub = _model(annotation)
        if sub is not None and optional_parent is None and list_parent is None:
            default_is_none = not info.is_required() and info.default is None
            yield Field(key, annotation, info, select)  # the whole sub-model: a scalar there is wrong
            yield from _walk(sub, f"{key}.", select, optional_parent=key if default_is_none else None)
            continue
        item = _list_item_model(annotation)
        if item is not None and optional_parent is None and list_parent is None:
            yield Field(key, annotation, info, select)
            yield from _walk(item, f"{key}.", select, list_parent=key)
            continue
        if sub is not None or item is not None:
            continue  # deeper nesting under an optional or list parent: covered by its parent's own entry
        if list_parent is not None:
            required = tuple((n, _placeholder(f.annotation)) for n, f in model.model_fields.items()
                             if f.is_required() and n != name)
            yield Field(key, annotation, info, select, via="item", container=list_parent, required=required)
        elif optional_parent is not None:
            yield Field(key, annotation, info, select, via="parent", container=optional_parent)
        else:
            yield Field(key, annotation, info, select)


def _list_item_model(annotation: Any) -> type[BaseModel] | None:
    for member in unwrap(annotation):
        if typing.get_origin(member) is list:
            (arg,) = typing.get_args(member)
            return _model(arg)
    return None


@cache
def schema_fields() -> tuple[Field, ...]:
    """Every field of every config group, from the schema itself: a new field is covered without a test edit."""
    return tuple(_walk(Experiment, "", ()))


# the values a required field of a variant needs to compose at all (a model directory, an endpoint)
VARIANT_REQUIRED = {"model=vllm": ("model.path=/tmp",),
                    "model=openai-compatible": ("model.base_url=http://127.0.0.1:9/v1", "model.model=x")}


def base_overrides(field: Field) -> list[str]:
    return [o for s in field.select for o in (s, *VARIANT_REQUIRED.get(s, ()))]


@cache
def base_data(select: tuple[str, ...]) -> dict[str, Any]:
    from forge_cli.config.compose import compose

    overrides = [o for s in select for o in (s, *VARIANT_REQUIRED.get(s, ()))]
    return compose(overrides).data


def schema_accepts(field: Field, value: Any) -> bool:
    """The schema's own verdict on the composed default experiment with ``field`` set to ``value`` (with the check
    of the env's task source and options that every command makes)."""
    import copy

    from pydantic import ValidationError

    from forge_cli.envs.resolve import validate_experiment
    from forge_cli.errors import ConfigError

    data = copy.deepcopy(base_data(field.select))
    parts = (field.container or field.key).split(".")
    node = data
    for part in parts[:-1]:
        node = node[part]
    if field.via == "key":
        node[parts[-1]] = value
    else:
        item = dict(field.required)
        item[field.leaf] = value
        node[parts[-1]] = [item] if field.via == "item" else item
    if field.key == "algo.group_size":
        data["rollout"]["samples_per_task"] = value  # ${algo.group_size} in experiment.yaml
    try:
        validate_experiment(data)
    except (ValidationError, ValueError, TypeError, ConfigError):
        return False
    return True


# ------------------------------------------------------------------ Hydra override literals
SAFE_TEXT_EXCLUDED = "\\'\"$\x00"


def hydra_literal(value: Any) -> str:
    """``value`` in Hydra's override grammar (strings single-quoted: they stay strings)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        assert not set(value) & set(SAFE_TEXT_EXCLUDED), value
        return f"'{value}'"
    if isinstance(value, list | tuple):
        return "[" + ",".join(hydra_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_literal(v)}" for k, v in value.items()) + "}"
    raise TypeError(value)


def nonexistent(tmp: Path) -> str:
    return str(tmp / "does-not-exist" / "nowhere")
