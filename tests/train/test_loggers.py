"""Experiment loggers (``trainer.loggers``, forge_cli/config/loggers.py, forge_cli/train/loggers/): each of forge's
writes a short run through ``MetricsLog`` that its own reader loads back with the same values (TensorBoard's
EventAccumulator, W&B's ``wandb leet inspect`` on the offline ``.wandb`` transaction log, MLflow's ``MlflowClient``
on the run's local store); unknown names and missing clients are one message, exit 2; ``forge train`` composes with
them (a dry run, and veRL's mapping); the docs' worked example logs through ``MetricsLog``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

from forge_cli.config.compose import compose
from forge_cli.config.loggers import LOGGERS, ExperimentLogger, logger_problems
from forge_cli.errors import UserError
from forge_cli.train.loggers.mlflow_logger import tracking_uri
from forge_cli.train.loggers.wandb_logger import wandb_mode
from forge_cli.train.metrics_log import MetricsLog
from forge_cli.train.verl import mapping
from tests.helpers import forge

REPO = Path(__file__).resolve().parents[2]
STEPS: list[dict[str, Any]] = [
    {"reward_mean": 0.25, "pass_rate": 0.5, "train_tokens": 120.0, "weight_version": "step-1",
     "dynamic_sampling": False},
    {"reward_mean": 0.5, "pass_rate": 0.75, "train_tokens": 96.0, "weight_version": "step-2",
     "eval_pass_rate": None},
    {"reward_mean": 0.875, "pass_rate": 1.0, "train_tokens": 64.0, "weight_version": "step-3"},
]
# what every logger gets of STEPS: numbers only (strings, booleans and None stay in metrics.jsonl)
SCALARS = {step: {k: v for k, v in m.items() if isinstance(v, float)} for step, m in enumerate(STEPS, 1)}
CONFIG = {"run": {"name": "loggers-test", "seed": 3}, "trainer": {"kind": "local", "steps": 3}}


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No user settings of the trackers reach the test (forge's defaults: W&B offline, MLflow in the run dir)."""
    for key in ("WANDB_MODE", "WANDB_PROJECT", "WANDB_ENTITY", "WANDB_DIR", "WANDB_API_KEY", "MLFLOW_TRACKING_URI",
                "MLFLOW_EXPERIMENT_NAME", "MLFLOW_RUN_ID"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "wandb-data"))


def _write(run_dir: Path, loggers: list[str]) -> None:
    log = MetricsLog(run_dir, loggers=loggers, run_name="loggers-test", config=CONFIG)
    try:
        for step, metrics in enumerate(STEPS, 1):
            log.write(step, metrics)
    finally:
        log.close()
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2, 3] and lines[0]["weight_version"] == "step-1"


def test_tensorboard_event_files_load_in_tensorboards_reader(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _write(tmp_path, ["tensorboard"])
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert sorted(events.Tags()["scalars"]) == ["pass_rate", "reward_mean", "train_tokens"]
    for key in ("reward_mean", "pass_rate", "train_tokens"):
        got = [(e.step, e.value) for e in events.Scalars(key)]
        assert got == [(step, pytest.approx(SCALARS[step][key])) for step in (1, 2, 3)]


def _wandb_records(path: Path, *flags: str) -> str:
    wandb = Path(sys.executable).parent / "wandb"  # the package's own CLI, beside this interpreter
    done = subprocess.run([str(wandb), "leet", "inspect", "--json", *flags, str(path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_wandb_writes_an_offline_run_that_wandbs_reader_loads(tmp_path: Path, clean_env: None) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    _write(run_dir, ["wandb"])
    (offline,) = (run_dir / "wandb").glob("offline-run-*")
    (log_file,) = offline.glob("run-*.wandb")
    records = [json.loads(line) for line in _wandb_records(log_file).splitlines()]
    history = {r["history"]["step"]["num"]: r["history"]["item"] for r in records if r["type"] == "history"}
    assert sorted(history) == [1, 2, 3]
    for step, scalars in SCALARS.items():
        assert {k: v for k, v in history[step].items() if not k.startswith("_")} == scalars
    summary = json.loads(_wandb_records(log_file, "--summary"))
    assert (summary["name"], summary["project"], summary["state"]) == ("loggers-test", "forge", "finished")
    assert summary["config"] == CONFIG and summary["step"] == 3


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # SQLAlchemy's, on MLflow's own store
def test_mlflow_writes_a_local_run_that_mlflows_client_loads(tmp_path: Path, clean_env: None) -> None:
    from mlflow.tracking import MlflowClient

    _write(tmp_path, ["mlflow"])
    assert (tmp_path / "mlflow.db").is_file()
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("forge")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "loggers-test" and run.info.status == "FINISHED"
    assert run.data.tags["forge.run_dir"] == str(tmp_path)
    assert run.data.params["trainer.steps"] == "3" and run.data.params["run.name"] == "loggers-test"
    for key in ("reward_mean", "pass_rate", "train_tokens"):
        history = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
        assert history == [(step, SCALARS[step][key]) for step in (1, 2, 3)]
    assert "weight_version" not in run.data.metrics


def test_the_users_settings_win(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert wandb_mode() == "offline" and tracking_uri(tmp_path) == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.example:5000")
    assert wandb_mode() == "online" and tracking_uri(tmp_path) == "http://mlflow.example:5000"


# ---------------------------------------------------------------- names and clients
class _Ghost(ExperimentLogger):
    """A logger whose client is not installed."""

    modules: ClassVar[tuple[str, ...]] = ("forge_no_such_client_module",)
    install: ClassVar[str] = "pip install forge-no-such-client"

    def start(self, run_dir: Path, run_name: str, config: Mapping[str, Any]) -> None:
        self.client("forge_no_such_client_module")

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        raise AssertionError("never started")


class _Recorder(ExperimentLogger):
    """Records what it is told (``events``: one list for every instance)."""

    events: ClassVar[list[tuple[str, Any]]] = []

    def start(self, run_dir: Path, run_name: str, config: Mapping[str, Any]) -> None:
        self.events.append(("start", run_name))

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        self.events.append(("log", (step, dict(scalars))))

    def close(self) -> None:
        self.events.append(("close", None))


class _Broken(ExperimentLogger):
    def start(self, run_dir: Path, run_name: str, config: Mapping[str, Any]) -> None:
        raise RuntimeError("tracking server out of reach")

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        raise AssertionError("never started")


@pytest.fixture
def fakes() -> Iterator[None]:
    for name, cls in (("test-ghost", _Ghost), ("test-recorder", _Recorder), ("test-broken", _Broken)):
        cls.name = name
        LOGGERS.add(name, cls)
    _Recorder.events.clear()
    yield
    for name in ("test-ghost", "test-recorder", "test-broken"):
        LOGGERS.remove(name)


def test_a_missing_client_is_one_message_with_the_install_command(tmp_path: Path, fakes: None) -> None:
    with pytest.raises(UserError) as info:
        MetricsLog(tmp_path, loggers=["test-recorder", "test-ghost"])
    error = info.value
    assert error.exit_code == 2 and "test-ghost logger needs" in error.message
    assert "forge_no_such_client_module" in error.message and "pip install forge-no-such-client" in (error.fix or "")
    assert _Recorder.events == []  # checked before any logger starts
    with pytest.raises(UserError, match="forge_no_such_client_module"):
        _Ghost().start(tmp_path, "x", {})  # start's own import says the same


def test_a_missing_wandb_or_mlflow_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb raises ImportError, find_spec finds nothing
    monkeypatch.setitem(sys.modules, "mlflow", None)
    for name in ("wandb", "mlflow"):
        with pytest.raises(UserError) as info:
            MetricsLog(tmp_path, loggers=["tensorboard", name])
        assert info.value.exit_code == 2 and f"the {name} logger needs the Python package(s) {name}" in \
            info.value.message
        assert "pip install 'forge-rl[loggers]'" in (info.value.fix or "")
    assert not (tmp_path / "tensorboard").exists() and not (tmp_path / "metrics.jsonl").exists()


def test_metrics_log_fans_out_numbers_and_closes_what_started(tmp_path: Path, fakes: None) -> None:
    log = MetricsLog(tmp_path, loggers=["test-recorder"], run_name="r")
    log.write(1, STEPS[0])
    log.close()
    assert _Recorder.events == [("start", "r"), ("log", (1, SCALARS[1])), ("close", None)]
    _Recorder.events.clear()
    with pytest.raises(UserError) as info:
        MetricsLog(tmp_path, loggers=["test-recorder", "test-broken"])
    assert info.value.exit_code == 2
    assert "test-broken logger could not start: RuntimeError: tracking server out of reach" in info.value.message
    assert _Recorder.events == [("start", tmp_path.name), ("close", None)]


def test_unknown_and_repeated_names_are_config_problems() -> None:
    problems = logger_problems(["tensorboard", "nope", "wandb", "wandb"])
    assert len(problems) == 2
    assert "unknown experiment logger 'nope'" in problems[0] and "registered: mlflow, tensorboard, wandb" in problems[0]
    assert "names wandb more than once" in problems[1]


def test_an_unknown_logger_stops_forge_train_with_exit_2(tmp_path: Path) -> None:
    done = forge("train", "--dry-run", "trainer.loggers=[tensorboard,nope]", f"run.output_dir={tmp_path}")
    assert done.returncode == 2, done.stderr
    assert "unknown experiment logger 'nope'" in done.stderr and "registered: mlflow, tensorboard, wandb" in done.stderr
    assert "Traceback" not in done.stderr and not any(tmp_path.iterdir())


def test_a_users_logger_whose_client_is_missing_stops_forge_train_with_exit_2(tmp_path: Path) -> None:
    (tmp_path / "my_ghost_logger.py").write_text(
        "from forge_cli.config.loggers import ExperimentLogger\n\n\n"
        "class Ghost(ExperimentLogger):\n"
        "    modules = ('forge_no_such_client_module',)\n"
        "    install = 'pip install forge-no-such-client'\n\n"
        "    def start(self, run_dir, run_name, config):\n        pass\n\n"
        "    def log(self, step, scalars):\n        pass\n")
    done = forge("train", "--dry-run", "trainer.loggers=[my_ghost_logger:Ghost]", f"run.output_dir={tmp_path / 'runs'}",
                 env={"PYTHONPATH": str(tmp_path)})
    assert done.returncode == 2, done.stderr
    assert "needs the Python package(s) forge_no_such_client_module" in done.stderr
    assert "pip install forge-no-such-client" in done.stderr and "Traceback" not in done.stderr


# ---------------------------------------------------------------- forge train composes with them
def test_forge_train_dry_run_with_wandb_and_mlflow(tmp_path: Path, clean_env: None) -> None:
    done = forge("train", "--dry-run", "trainer.loggers=[tensorboard,wandb,mlflow]", f"run.output_dir={tmp_path}",
                 "trainer.steps=2")
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("logs: ")]
    assert f"metrics: {tmp_path}/<run>/metrics.jsonl" in line
    assert f"tensorboard (tensorboard --logdir {tmp_path}/<run>/tensorboard)" in line
    assert f"wandb (a W&B run (offline) in {tmp_path}/<run>/wandb)" in line
    assert f"mlflow (an MLflow run in sqlite:///{tmp_path.resolve()}/<run>/mlflow.db)" in line
    assert not any(tmp_path.iterdir())
    composed = compose(["trainer.loggers=[wandb,mlflow]"]).experiment
    assert composed.trainer.loggers == ["wandb", "mlflow"]
    assert compose([]).experiment.trainer.loggers == ["tensorboard"]  # as before: TensorBoard only


def test_verl_maps_the_loggers_to_its_own_trackers(tmp_path: Path) -> None:
    exp = compose(["trainer=verl", "trainer.loggers=[tensorboard,wandb,mlflow]"]).experiment
    inputs = mapping.Inputs(tmp_path, "/m", Path("/t"), Path("/v"), Path("/a"), 10, True)
    assert mapping.overrides(exp, inputs)["trainer.logger"] == ["console", "tensorboard", "wandb", "mlflow"]
    assert "trainer.logger=[console,tensorboard,wandb,mlflow]" in mapping.hydra_args(mapping.overrides(exp, inputs))
    assert mapping.overrides(compose(["trainer=verl"]).experiment, inputs)["trainer.logger"] == ["console",
                                                                                                  "tensorboard"]
    env = mapping.logger_env(exp.trainer.loggers, tmp_path, {})
    assert env == {"TENSORBOARD_DIR": str(tmp_path / "tensorboard"), "WANDB_DIR": str(tmp_path),
                   "WANDB_MODE": "offline", "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path.resolve()}/mlflow.db"}
    users = mapping.logger_env(exp.trainer.loggers, tmp_path, {"WANDB_MODE": "online", "MLFLOW_TRACKING_URI": "x"})
    assert "WANDB_MODE" not in users and "MLFLOW_TRACKING_URI" not in users


def test_verl_refuses_a_logger_it_has_no_tracker_for(fakes: None) -> None:
    exp = compose(["trainer=verl", "trainer.loggers=[tensorboard,test-recorder]"]).experiment
    problems = mapping.unsupported(exp)
    assert [fix for problem, fix in problems if "test-recorder" in problem] == ["trainer.loggers=[tensorboard] (or "
                                                                                 "trainer=local)"]


def test_verl_preflight_names_a_tracker_client_missing_in_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from forge_cli.train.verl import checks

    installed = {"verl": "0.9.1", "forge_rl": "0.1.0", "ray": "2", "vllm": "0.24", "tensorboard": "2", "wandb": "0.31"}
    monkeypatch.setattr(checks, "dist_version", lambda env, dist: installed.get(dist))
    monkeypatch.setattr(checks, "gpu_count", lambda: 8)
    exp = compose(["trainer=verl", "trainer.loggers=[tensorboard,wandb,mlflow]"]).experiment
    found = {c.name: c for c in checks.check_verl(exp)}
    assert found["tensorboard logger in veRL's environment"].ok and found["wandb logger in veRL's environment"].ok
    mlflow = found["mlflow logger in veRL's environment"]
    assert not mlflow.ok and mlflow.fix.endswith("/bin/pip install mlflow-skinny sqlalchemy alembic")


# ---------------------------------------------------------------- the docs' worked example
def test_the_docs_example_logger_writes_its_csv(tmp_path: Path) -> None:
    page = (REPO / "docs" / "extending" / "logger.md").read_text()
    code = re.findall(r"^```python\n(.*?)^```", page, flags=re.M | re.S)[0]
    module = type(sys)("docs_example_loggers")
    sys.modules["docs_example_loggers"] = module
    try:
        exec(compile(code, "<docs logger.md>", "exec"), module.__dict__)
        _write(tmp_path, ["tensorboard", "docs_example_loggers:CsvLogger"])
        assert LOGGERS.registered("csv") is module.CsvLogger  # named on definition: trainer.loggers=[csv]
    finally:
        del sys.modules["docs_example_loggers"]
        LOGGERS.remove("csv")
    rows = (tmp_path / "metrics.csv").read_text().splitlines()
    assert rows[0] == "step,reward_mean,pass_rate,train_tokens"
    assert rows[1:] == [f"{s},{m['reward_mean']},{m['pass_rate']},{m['train_tokens']}" for s, m in SCALARS.items()]
