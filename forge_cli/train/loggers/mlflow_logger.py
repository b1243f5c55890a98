"""``trainer.loggers: [..., mlflow]``: an MLflow run, in a local store by default.

The store is ``sqlite:///RUN/mlflow.db`` (MLflow's own database backend; ``mlflow ui --backend-store-uri
sqlite:///RUN/mlflow.db`` shows it) unless ``MLFLOW_TRACKING_URI`` names another (a tracking server, a database);
``MLFLOW_EXPERIMENT_NAME`` names the experiment (default ``forge``). The run is named after forge's run, tagged with
its directory, and carries the composed experiment as parameters (dotted keys). MLflow's telemetry is off unless
the user turned it on (``MLFLOW_DISABLE_TELEMETRY``).
"""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from forge_cli.config.loggers import ExperimentLogger

EXPERIMENT = "forge"
# the tracking URIs' schemes of MLflow's database store (SQLAlchemy's dialects)
DATABASES = ("sqlite", "postgresql", "mysql", "mssql")
# MLflow's limits: parameters per log_batch call, characters of a parameter's value
_PARAMS_PER_BATCH = 100
_PARAM_CHARS = 500


def tracking_uri(run_dir: Path) -> str:
    """``MLFLOW_TRACKING_URI`` when the user set it, else the run directory's own SQLite store."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{run_dir.resolve() / 'mlflow.db'}"


def _flat(value: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(value, Mapping):
        for key, sub in value.items():
            yield from _flat(sub, f"{prefix}{key}.")
    else:
        yield prefix.rstrip("."), str(value)[:_PARAM_CHARS]


class MlflowLogger(ExperimentLogger, name="mlflow", verl="mlflow", modules=("mlflow",),
                   install="pip install 'forge-rl[loggers]' (or pip install mlflow-skinny sqlalchemy alembic)"):
    """Each step's scalars as one ``log_batch`` of metrics at that step."""

    @classmethod
    def where(cls, run_dir: Path) -> str:
        return f"an MLflow run in {tracking_uri(run_dir)}"

    @classmethod
    def missing(cls) -> list[str]:
        """mlflow, and SQLAlchemy and alembic when the store is a database (the default: a SQLite file)."""
        if os.environ.get("MLFLOW_TRACKING_URI", "sqlite:").split(":")[0].split("+")[0] not in DATABASES:
            return super().missing()
        return [*super().missing(), *[m for m in ("sqlalchemy", "alembic") if importlib.util.find_spec(m) is None]]

    def start(self, run_dir: Path, run_name: str, config: Mapping[str, Any]) -> None:
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        self.check()
        from mlflow.entities import Metric, Param  # lazy: the optional mlflow client
        from mlflow.tracking import MlflowClient  # lazy: the optional mlflow client

        self.metric = Metric
        self.mlflow = MlflowClient(tracking_uri=tracking_uri(run_dir))
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or EXPERIMENT
        found = self.mlflow.get_experiment_by_name(name)
        experiment = found.experiment_id if found is not None else self.mlflow.create_experiment(
            name, artifact_location=None if "MLFLOW_TRACKING_URI" in os.environ else (run_dir / "mlartifacts").as_uri())
        self.run_id = self.mlflow.create_run(experiment, run_name=run_name,
                                             tags={"forge.run_dir": str(run_dir)}).info.run_id
        params = [Param(key, value) for key, value in _flat(config)]
        for i in range(0, len(params), _PARAMS_PER_BATCH):
            self.mlflow.log_batch(self.run_id, params=params[i:i + _PARAMS_PER_BATCH])

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        now = int(time.time() * 1000)
        self.mlflow.log_batch(self.run_id, metrics=[self.metric(key, float(value), now, step)
                                                    for key, value in scalars.items()])

    def close(self) -> None:
        self.mlflow.set_terminated(self.run_id)
