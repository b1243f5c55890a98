"""``forge doctor trainer=verl`` (and veRL's preflight): veRL's environment and the GPUs its workers need.

Named by :class:`~forge_cli.train.verl.options.VerlTrainerConfig`'s ``checks``; ``forge_cli.prerequisites`` calls it
for a ``trainer=verl`` experiment.
"""

from __future__ import annotations

import shutil
import subprocess

from forge_cli.check import Check, dist_version
from forge_cli.config.schema import Experiment
from forge_cli.paths import env_dir
from forge_cli.train.verl.mapping import VERL_VERSION, verl_loggers
from forge_cli.train.verl.options import verl_options

# what veRL's trackers import in its trainer process, by its trainer.logger name (alternatives split by |): MLflow's
# SQLite store (forge's default) needs SQLAlchemy and alembic
TRACKER_DISTS = {"tensorboard": ("tensorboard",), "wandb": ("wandb",),
                 "mlflow": ("mlflow|mlflow_skinny", "sqlalchemy", "alembic")}


def check_verl(exp: Experiment) -> list[Check]:
    """``trainer=verl``: veRL's environment (veRL 0.9.1, forge, vLLM, Ray) and the GPUs its workers need."""
    where, setup = env_dir("verl"), "scripts/setup.sh verl"
    version = dist_version("verl", "verl")
    checks = [Check("veRL environment", version == VERL_VERSION,
                    f"verl {version} in {where}" if version else f"no veRL in {where}",
                    "" if version == VERL_VERSION else f"{setup} (forge maps onto veRL {VERL_VERSION})")]
    forge_in = dist_version("verl", "forge_rl")
    checks.append(Check("forge in veRL's environment", forge_in is not None,
                        f"forge-rl {forge_in} (its agent loop runs in veRL's workers)" if forge_in else
                        f"forge is not installed in {where}", "" if forge_in else setup))
    for dist, why in (("ray", "veRL's workers"), ("vllm", "veRL's rollout replicas (CUDA build)")):
        found = dist_version("verl", dist)
        checks.append(Check(f"{dist} in veRL's environment", found is not None,
                            f"{dist} {found}" if found else f"no {dist} in {where} ({why})",
                            "" if found else f"{where}/bin/pip install {dist} (on a GPU node: the version veRL "
                            f"{VERL_VERSION} supports, see docs/verl.md)"))
    t = verl_options(exp)
    for tracker in verl_loggers(t.loggers):
        absent = [d.split("|")[-1].replace("_", "-") for d in TRACKER_DISTS.get(tracker, ())
                  if not any(dist_version("verl", a) for a in d.split("|"))]
        checks.append(Check(f"{tracker} logger in veRL's environment", not absent,
                            f"missing in {where}: {', '.join(absent)}" if absent else "its client is installed",
                            f"{where}/bin/pip install {' '.join(absent)}" if absent else ""))
    if t.ray_address:
        checks.append(Check("GPUs", True, f"on the Ray cluster {t.ray_address} (Ray places the workers)"))
    else:
        have = gpu_count()
        checks.append(Check("GPUs", have >= t.n_gpus_per_node, f"{have} NVIDIA GPU(s) here (nvidia-smi), "
                            f"trainer.n_gpus_per_node={t.n_gpus_per_node}",
                            "" if have >= t.n_gpus_per_node else "run on a GPU node, or give trainer.ray_address"))
    return checks


def gpu_count() -> int:
    """NVIDIA GPUs on this machine (``nvidia-smi -L``; 0 without the driver)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))
