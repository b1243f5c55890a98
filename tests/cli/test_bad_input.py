"""Bad input never surfaces a traceback: one clear message on stderr and forge's exit code (docs/configuration.md,
"Errors and exit codes"): 2 when the user's input is wrong (usage, config values, unknown names or ids, a path the
user gave that does not exist), 1 when the machine must be fixed (a missing prerequisite, a daemon down, a failed build
or service).

Generated cases cover every command and option (walked from the Typer app) and every field of every config group
(walked from forge_cli/config/schema.py: a new field or option is covered without editing this file); a table of
hand-picked cases covers what needs a real path, port or process. Runs in-process through ``forge_cli.cli.app.main``
(a few cases as real subprocesses) with bounded, derandomized hypothesis examples: `pytest tests/cli/test_bad_input.py`.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.cli.bad_input_support import (
    SAFE_TEXT_EXCLUDED,
    TRACEBACK,
    Field,
    Outcome,
    assert_clean,
    assert_error,
    base_overrides,
    run_forge,
    schema_accepts,
    schema_fields,
    unwrap,
)
from tests.helpers import forge

BOUNDED = settings(max_examples=25, deadline=None, derandomize=True, database=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
# what may end up in a value: unicode (no NUL: argv cannot carry it), empty, huge
TEXT = st.one_of(st.just(""), st.just("x" * 20_000), st.just("ünïcødé ✓ 日本語 🚀"),
                 st.text(st.characters(codec="utf-8", exclude_characters=SAFE_TEXT_EXCLUDED),
                         max_size=40))
VALUES = st.one_of(TEXT, st.integers(min_value=-(2**70), max_value=2**70), st.sampled_from([-1, 0, 1, 65536, 2**63]),
                   st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(),
                   st.lists(TEXT, max_size=3), st.dictionaries(st.sampled_from(["a", "name", "x"]), TEXT, max_size=2))


# ------------------------------------------------------------------ every command and option
def _commands() -> list[tuple[str, ...]]:
    import typer.main

    from forge_cli.cli.app import app

    found: list[tuple[str, ...]] = []

    def walk(group: Any, prefix: tuple[str, ...]) -> None:
        for name, command in group.commands.items():
            if hasattr(command, "commands"):
                walk(command, (*prefix, name))
            else:
                found.append((*prefix, name))

    walk(typer.main.get_command(app), ())
    return found


def _command(path: tuple[str, ...]) -> Any:
    """The Typer (vendored click) command at ``path``."""
    import typer.main

    from forge_cli.cli.app import app

    command: Any = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]
    return command


def _is_option(param: Any) -> bool:
    return hasattr(param, "is_flag")


COMMANDS = _commands()
NUMERIC = [(c, p.opts[0]) for c in COMMANDS for p in _command(c).params
           if _is_option(p) and p.type_descriptor.annotation in (int, float, int | None, float | None)]
REQUIRED = [(c, p.name) for c in COMMANDS for p in _command(c).params if p.required]


def _filled(path: tuple[str, ...], skip: str = "") -> list[str]:
    """Valid-looking required arguments and options of ``path`` (so only the case's own value is wrong)."""
    args: list[str] = []
    for param in _command(path).params:
        if not param.required or param.name == skip:
            continue
        value = "http://127.0.0.1:9" if param.name == "upstream" else "x"
        if _is_option(param):
            args += [param.opts[0], value]
        else:
            args.append(value)
    return args


def test_every_command_is_walked() -> None:
    names = {c[0] for c in COMMANDS}
    assert {"train", "rollout", "eval", "serve", "proxy", "harness", "samples", "image", "k8s", "traces", "config",
            "doctor", "model", "sandbox"} <= names


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_unknown_option(path: tuple[str, ...]) -> None:
    assert_error(run_forge(*path, "--no-such-option", "1"), 2, "No such option")


@pytest.mark.parametrize(("path", "name"), REQUIRED, ids=lambda v: " ".join(v) if isinstance(v, tuple) else v)
def test_missing_required(path: tuple[str, ...], name: str) -> None:
    assert_error(run_forge(*path, *_filled(path, skip=name)), 2, "Missing")


@pytest.mark.parametrize(("path", "option"), NUMERIC, ids=lambda v: " ".join(v) if isinstance(v, tuple) else v)
@given(text=TEXT)
@settings(BOUNDED, max_examples=3)
def test_numeric_option_wrong_type(path: tuple[str, ...], option: str, text: str) -> None:
    param = next(p for p in _command(path).params if option in p.opts)
    number = int if int in (param.type_descriptor.annotation, param.type_descriptor.annotation | None) else float
    try:
        number(text)
        return  # a number after all
    except ValueError:
        pass
    assert_error(run_forge(*path, *_filled(path), option, text), 2, option)


@pytest.mark.parametrize("path", [c for c in COMMANDS if any(o == "--port" for _, o in NUMERIC if _ == c)],
                         ids=" ".join)
@pytest.mark.parametrize("port", ["99999", "-1", "65536"])
def test_port_out_of_range(path: tuple[str, ...], port: str) -> None:
    assert_error(run_forge(*path, *_filled(path), "--port", port), 2, "--port")


# ------------------------------------------------------------------ every field of every config group
FIELDS = schema_fields()


def _wrong_type(field: Field) -> Any:
    """A value of the wrong type for ``field``: a mapping where text belongs, a word where anything else does."""
    members = [m for m in unwrap(field.annotation) if m is not type(None)]
    return {"a": {"b": 1}} if members == [str] else "not-a-valid-value-x"


def test_every_group_is_walked() -> None:
    keys = {f.key for f in FIELDS}
    for key in ("harness.package.manager", "env.services.port", "runtime.resources.memory", "runtime.namespace",
                "model.kv_cache_gb", "model.base_url", "algo.clip_ratio_c", "trainer.lora.rank",
                "rollout.sampling.top_p", "proxy.port", "tools.port", "eval.trials", "run.seed"):
        assert key in keys, key


def _is_leaf(field: Field) -> bool:
    """A plain value (not a whole sub-model, a variant's tag, inside a list or optional model): many fit in one
    command line."""
    return (field.via == "key" and "." in field.key and field.leaf not in ("kind", "source")
            and not any(f.key.startswith(field.key + ".") for f in FIELDS))


def _batches() -> list[tuple[tuple[str, ...], tuple[Field, ...]]]:
    """The leaves grouped by the options that select them (one invocation each), then every other field alone."""
    batches: dict[tuple[str, ...], list[Field]] = {}
    for field in FIELDS:
        if _is_leaf(field):
            batches.setdefault(field.select, []).append(field)
    alone = [(f.select, (f,)) for f in FIELDS if not _is_leaf(f)]
    return [(select, tuple(fields)) for select, fields in batches.items()] + alone


def _batch_id(value: Any) -> str:
    if not value:
        return "default"
    if isinstance(value[0], str):
        return "+".join(value)
    return str(value[0].id) if len(value) == 1 else f"{len(value)} fields"


@pytest.mark.parametrize(("select", "fields"), _batches(), ids=_batch_id)
def test_config_field_wrong_type(select: tuple[str, ...], fields: tuple[Field, ...]) -> None:
    """Every field with a value of the wrong type: exit 2 and every field named, all problems reported at once."""
    wrong = [(f, _wrong_type(f)) for f in fields]
    for field, value in wrong:
        assert not schema_accepts(field, value), f"{field.key} accepts {value!r}"
    outcome = run_forge("config", "show", *base_overrides(fields[0]), *(f.override(v) for f, v in wrong))
    assert_error(outcome, 2, *(f.key if f.via == "key" else f.container for f in fields))


@pytest.mark.parametrize("select", sorted({f.select for f in FIELDS if _is_leaf(f)}), ids=_batch_id)
def test_every_field_is_settable(select: tuple[str, ...]) -> None:
    """Every plain field takes its own valid value as key=value, also those an option's YAML leaves out (their
    schema default): the schema, not the shipped files, says what can be set."""
    import json

    fields = [f for f in FIELDS if _is_leaf(f) and f.select == select]
    values = {f.key: _current(f) for f in fields}
    outcome = run_forge("config", "show", "--json", *base_overrides(fields[0]),
                        *(f.override(v) for f in fields if (v := values[f.key]) is not _UNSET))
    assert_clean(outcome)
    assert outcome.code == 0, str(outcome)
    shown = json.loads(outcome.stdout)
    for key, value in values.items():
        if value is not _UNSET:
            node: Any = shown
            for part in key.split("."):
                node = node[part]
            assert node == value, key


_UNSET = object()


def _current(field: Field) -> Any:
    """The field's value in the composed default experiment, else its schema default (``_UNSET``: neither can be
    written as an override literal here)."""
    from tests.cli.bad_input_support import base_data

    node: Any = base_data(field.select)
    for part in field.key.split("."):
        if not isinstance(node, dict) or part not in node:
            node = field.info.default
            break
        node = node[part]
    ok = isinstance(node, int | float | bool | str | list | dict) and "$" not in str(node) and "'" not in str(node)
    return node if ok and not (isinstance(node, float) and node != node) else _UNSET


@given(data=st.data())
@settings(BOUNDED, max_examples=40)
def test_config_values_agree_with_schema(data: st.DataObject) -> None:
    """Any value in any field: `config show` exits 0 exactly when the schema accepts it, else 2 with the key; no
    traceback either way (unicode, empty and 20k-character strings, huge and non-finite numbers, lists, maps)."""
    field = data.draw(st.sampled_from(FIELDS), label="field")
    value = data.draw(VALUES, label="value")
    outcome = run_forge("config", "show", *base_overrides(field), field.override(value))
    if schema_accepts(field, value):
        assert_clean(outcome)
        assert outcome.code == 0, str(outcome)
    else:
        assert_error(outcome, 2, field.key.split(".")[0])


@pytest.mark.parametrize("command", [("rollout", "--dry-run"), ("train", "--dry-run"), ("eval", "--dry-run")],
                         ids=" ".join)
@given(data=st.data())
@settings(BOUNDED, max_examples=10)
def test_plans_survive_any_value(command: tuple[str, ...], data: st.DataObject) -> None:
    """Values the schema accepts reach the plan: it is shown (0) or refused with one message (2), never a crash."""
    field = data.draw(st.sampled_from([f for f in FIELDS if not f.select or f.select[0].startswith("runtime")]),
                      label="field")
    value = data.draw(VALUES, label="value")
    outcome = run_forge(*command, *base_overrides(field), field.override(value))
    assert_clean(outcome)
    assert outcome.code in (0, 2), str(outcome)


@given(text=st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=60))
@settings(BOUNDED, max_examples=20)
def test_raw_override_text(text: str) -> None:
    """Whatever a user types as an override: a config or one message, exit 0 or 2."""
    outcome = run_forge("config", "show", text)
    assert_clean(outcome)
    assert outcome.code in (0, 2), str(outcome)


# ------------------------------------------------------------------ hand-picked cases
@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield int(sock.getsockname()[1])


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, str]:
    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / "not-a-store.sqlite").write_text("not sqlite\n")
    return {"MISSING": str(tmp_path / "does-not-exist"), "EMPTY": str(empty),
            "FILE": str(tmp_path / "not-a-store.sqlite"), "UNWRITABLE": "/dev/null/out",
            "OUT": str(tmp_path / "out.jsonl")}


TABLE: list[tuple[str, int, list[str], list[str]]] = [
    # (id, exit code, args ({MISSING}, {EMPTY}, {FILE}, {UNWRITABLE}, {OUT}, {BUSY} filled in), needles on stderr)
    ("serve port overflow", 2, ["serve", "--port", "99999"], ["--port", "65535"]),
    ("serve port negative", 2, ["serve", "--port", "-1"], ["--port"]),
    ("serve model.port out of range", 2, ["serve", "model.port=99999"], ["model.port"]),
    ("serve timeout zero", 2, ["serve", "--timeout", "0"], ["--timeout"]),
    ("serve stop unknown port", 2, ["serve", "--stop", "--port", "1"], ["no detached forge server on port 1"]),
    ("serve openai-compatible", 2, ["serve", "model=openai-compatible", "model.base_url=http://127.0.0.1:9/v1",
                                    "model.model=x"], ["external endpoint"]),
    ("proxy upstream not a url", 2, ["proxy", "--upstream", "notaurl"], ["'notaurl' is not an http(s) URL"]),
    ("proxy upstream empty", 2, ["proxy", "--upstream", ""], ["no policy server URL"]),
    ("proxy upstream port", 2, ["proxy", "--upstream", "http://127.0.0.1:99999"], ["http://127.0.0.1:99999"]),
    ("proxy upstream one of two", 2, ["proxy", "--upstream", "http://127.0.0.1:9,ftp://x"], ["'ftp://x'"]),
    ("proxy port overflow", 2, ["proxy", "--upstream", "http://127.0.0.1:9", "--port", "70000"], ["--port"]),
    ("proxy port busy", 2, ["proxy", "--upstream", "http://127.0.0.1:9", "--port", "{BUSY}"], ["already in use"]),
    ("proxy max body zero", 2, ["proxy", "--upstream", "http://127.0.0.1:9", "--max-body-mb", "0"], ["--max-body-mb"]),
    ("proxy max output negative", 2, ["proxy", "--upstream", "http://127.0.0.1:9", "--max-output-tokens", "-5"],
     ["--max-output-tokens"]),
    ("proxy store unwritable", 2, ["proxy", "--upstream", "http://127.0.0.1:9", "--store", "{UNWRITABLE}/t.sqlite"],
     ["/dev/null/out"]),
    ("proxy store directory", 2, ["proxy", "--upstream", "http://127.0.0.1:9", "--store", "{EMPTY}"],
     ["is a directory"]),
    ("proxy host unknown", 2, ["proxy", "--upstream", "http://127.0.0.1:9", "--host", "no-such-host.invalid"],
     ["no-such-host.invalid"]),
    ("rollout proxy.upstream", 2, ["rollout", "--dry-run", "proxy.upstream=notaurl"], ["proxy.upstream"]),
    ("rollout harbor path", 2, ["rollout", "--dry-run", "+env=harbor", "env.path={MISSING}"], ["{MISSING}"]),
    ("rollout builtin path", 2, ["rollout", "--dry-run", "env.path={MISSING}"], ["{MISSING}"]),
    ("rollout replay missing run", 2, ["rollout", "--replay", "{MISSING}/r-1"], ["RUN_DIR/ROLLOUT_ID"]),
    ("rollout until alone", 2, ["rollout", "--until", "3"], ["--until goes with --replay"]),
    ("branch missing run", 2, ["branch", "{MISSING}/r-1"], ["RUN_DIR/ROLLOUT_ID"]),
    ("branch no continuations", 2, ["branch", "{MISSING}/r-1", "-n", "0"], ["-n 0"]),
    ("rollout unknown task id", 2, ["rollout", "--dry-run", "env.task_ids=[nope]"], ["unknown task id", "nope"]),
    ("rollout unknown split", 2, ["rollout", "--dry-run", "env.split=nope"], ["unknown split 'nope'"]),
    ("rollout relative source", 2, ["rollout", "--dry-run", "env.source=..x:Y"], ["cannot import task source"]),
    ("rollout source not a class", 2, ["rollout", "--dry-run", "env.source=os:path"], ["not a TaskSource"]),
    ("rollout unknown source", 2, ["rollout", "--dry-run", "env.source=nosuch"], ["unknown task source 'nosuch'"]),
    ("rollout env option", 2, ["rollout", "--dry-run", "+env.options.nope=1"],
     ["env.options for source 'builtin'", "nope"]),
    ("rollout unknown harness", 2, ["rollout", "--dry-run", "harness=opnclaw"], ["did you mean 'openclaw'"]),
    ("rollout unicode option", 2, ["rollout", "--dry-run", "harness=ÿ€"], ["harness=ÿ€"]),
    ("rollout huge option", 2, ["rollout", "--dry-run", "harness=" + "a" * 5000], ["harness"]),
    ("rollout config dir missing", 2, ["rollout", "--dry-run", "--config-dir", "{MISSING}"], ["no such directory"]),
    ("rollout config dir is a file", 2, ["rollout", "--dry-run", "--config-dir", "{FILE}"], ["no such directory"]),
    ("rollout proxy port busy", 2, ["rollout", "proxy.port={BUSY}"], ["proxy port {BUSY}", "in use"]),
    ("train resume missing", 2, ["train", "--resume", "{MISSING}"], ["not a directory"]),
    ("train resume not a run", 2, ["train", "--resume", "{EMPTY}"], ["no config.yaml"]),
    ("train resume with overrides", 2, ["train", "--resume", "{EMPTY}", "trainer.steps=2"], ["no overrides"]),
    ("train verl what it cannot do", 2, ["train", "--dry-run", "trainer=verl", "algo.drop_group_on_infra=true"],
     ["drop_group_on_infra"]),
    ("train openai-compatible", 2, ["train", "--dry-run", "model=openai-compatible",
                                    "model.base_url=http://127.0.0.1:9/v1", "model.model=x"], ["openai-compatible"]),
    ("train group size conflict", 2, ["train", "--dry-run", "algo.group_size=4", "rollout.samples_per_task=3"],
     ["group"]),
    ("eval resume missing", 2, ["eval", "--resume", "{MISSING}"], ["not a directory"]),
    ("eval compare missing", 2, ["eval", "--compare", "{MISSING}", "{MISSING}"], ["no such run directory"]),
    ("eval compare not runs", 2, ["eval", "--compare", "{EMPTY}", "{EMPTY}"], ["no eval.json"]),
    ("eval compare and overrides", 2, ["eval", "--compare", "{EMPTY}", "{EMPTY}", "eval.trials=2"], ["--compare"]),
    ("samples run missing", 2, ["samples", "export", "{MISSING}", "{OUT}"], ["no such run directory"]),
    ("samples not a run", 2, ["samples", "export", "{EMPTY}", "{OUT}"], ["not a run directory"]),
    ("samples format", 2, ["samples", "export", "{EMPTY}", "{OUT}", "--format", "xml"], ["--format"]),
    ("samples timeout", 2, ["samples", "export", "{EMPTY}", "{OUT}", "--timeout", "never"], ["--timeout"]),
    ("samples max seq len", 2, ["samples", "export", "{EMPTY}", "{OUT}", "--max-seq-len", "1"], ["--max-seq-len"]),
    ("samples tokenizer missing", 2, ["samples", "export", "{EMPTY}", "{OUT}", "--tokenizer", "{MISSING}"],
     ["--tokenizer"]),
    ("traces store missing", 2, ["traces", "ls", "--store", "{MISSING}"], ["no trace store"]),
    ("traces store directory", 2, ["traces", "ls", "--store", "{EMPTY}"], ["no trace store"]),
    ("traces store not sqlite", 2, ["traces", "ls", "--store", "{FILE}"], ["not a forge trace store"]),
    ("traces show not sqlite", 2, ["traces", "show", "r1", "--store", "{FILE}"], ["not a forge trace store"]),
    ("traces export format", 2, ["traces", "export", "{OUT}", "--store", "{FILE}", "--format", "xml"],
     ["unknown export format"]),
    ("traces export not sqlite", 2, ["traces", "export", "{OUT}", "--store", "{FILE}"], ["not a forge trace store"]),
    ("harness unknown", 2, ["harness", "install", "no-such-harness"], ["unknown harness"]),
    ("harness binary missing", 2, ["harness", "install", "zeroclaw", "--binary", "{MISSING}", "--offline"],
     ["{MISSING}"]),
    ("image context missing", 2, ["image", "build", "t:x", "{MISSING}"], ["not a directory"]),
    ("image no dockerfile", 2, ["image", "build", "t:x", "{EMPTY}"], ["no Dockerfile"]),
    ("k8s proxy port", 2, ["k8s", "manifests", "--proxy-port", "99999"], ["proxy_port"]),
    ("k8s namespace empty", 2, ["k8s", "manifests", "--namespace", ""], ["namespace"]),
    ("k8s namespace unicode", 2, ["k8s", "manifests", "--namespace", "nämespace"], ["namespace"]),
    ("k8s upstream", 2, ["k8s", "manifests", "--proxy-upstream", "notaurl"], ["proxy_upstream"]),
    ("sandbox unknown runtime", 2, ["sandbox", "cleanup", "--runtime", "nope"], ["unknown runtime 'nope'"]),
    ("model prepare openai-compatible", 2, ["model", "prepare", "model=openai-compatible",
                                            "model.base_url=http://127.0.0.1:9/v1", "model.model=x"],
     ["external endpoint"]),
    ("model prepare path missing", 2, ["model", "prepare", "model=vllm", "model.path={MISSING}"], ["{MISSING}"]),
    ("unknown command", 2, ["no-such-command"], ["No such command"]),
    ("config group unknown", 2, ["config", "show", "runtime=podman"], ["unknown option 'podman'"]),
]


@pytest.mark.parametrize(("code", "args", "needles"), [c[1:] for c in TABLE], ids=[c[0] for c in TABLE])
def test_hand_picked(code: int, args: list[str], needles: list[str], paths: dict[str, str], busy_port: int) -> None:
    values = {**paths, "BUSY": str(busy_port)}

    def fill(text: str) -> str:
        for name, value in values.items():
            text = text.replace("{" + name + "}", value)
        return text

    assert_error(run_forge(*map(fill, args)), code, *map(fill, needles))


# the machine, not the input: exit 1 with the fix
def test_missing_prerequisites_exit_1(tmp_path: Path) -> None:
    home = {"FORGE_HOME": str(tmp_path / "bare-home")}
    assert_error(run_forge("serve", "--port", "0", env=home), 1, "vLLM environment is missing", "fix:")
    assert_error(run_forge("proxy", "--upstream", "http://127.0.0.1:9", env=home), 1, "mitmdump not found", "fix:")
    doctor = run_forge("doctor", env=home)
    assert_clean(doctor)
    assert_error(doctor, 1, "prerequisite(s) missing", "vLLM environment")
    assert "fix:" in doctor.stdout, str(doctor)


def test_docker_daemon_down_exit_1() -> None:
    outcome = run_forge("sandbox", "cleanup", "--runtime", "docker", "--docker-host", "unix:///nonexistent.sock")
    assert_error(outcome, 1)


# real processes: the entry points that spawn children print the child's failure as one message
@pytest.mark.parametrize("args", [["proxy", "--upstream", "notaurl"], ["serve", "--port", "99999"],
                                  ["rollout", "--dry-run", "+env=harbor", "env.path=/nonexistent"]], ids=" ".join)
def test_subprocess(args: list[str]) -> None:
    result = forge(*args, timeout=90)
    outcome = Outcome(tuple(args), result.returncode, result.stdout, result.stderr)
    assert_error(outcome, 2)
    assert TRACEBACK not in result.stderr
