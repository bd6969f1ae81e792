"""Experiment tracking beside metrics.jsonl (rank 0): TensorBoard event files when `training.tensorboard`
is on, and Weights & Biases or MLflow when their standard environment variables switch them on.

W&B and MLflow are not dependencies: a job that sets WANDB_PROJECT (or MLFLOW_TRACKING_URI) in its
pod template's env, in an image that has the package, logs there too; without the package, a
warning says so and training goes on. Each logged metric becomes a scalar named `train/<field>`,
and evalLoss `eval/loss`, at its optimizer step.
"""

from __future__ import annotations

import importlib
import logging
import os
from pathlib import Path
from typing import Any, Protocol

from ..contract.config import TrainingConfig
from ..contract.validation import Problem, ProblemsError

log = logging.getLogger(__name__)

TENSORBOARD_DIR = "tensorboard"
WANDB_ENV = "WANDB_PROJECT"  # W&B's own variable for the project; WANDB_API_KEY, WANDB_ENTITY etc. as usual
MLFLOW_ENV = "MLFLOW_TRACKING_URI"  # MLflow's own; MLFLOW_EXPERIMENT_NAME etc. as usual


class Tracker(Protocol):
    def log(self, step: int, scalars: dict[str, float]) -> None: ...

    def close(self) -> None: ...


def scalars_of(record: dict[str, Any]) -> dict[str, float]:
    """A metrics.jsonl record's numbers, named for the trackers' charts."""
    return {
        "eval/loss" if key == "evalLoss" else f"train/{key}": float(value)
        for key, value in record.items()
        if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool)
    }


class TensorBoard:
    def __init__(self, directory: Path):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            message = (
                "needs the tensorboard package: pip install 'scaletrain[tensorboard]' in the image, or turn it off"
            )
            raise ProblemsError([Problem(("tensorboard",), message)]) from None
        self.writer = SummaryWriter(log_dir=str(directory))

    def log(self, step: int, scalars: dict[str, float]) -> None:
        for name, value in scalars.items():
            self.writer.add_scalar(name, value, step)
        self.writer.flush()  # a killed pod keeps what was logged

    def close(self) -> None:
        self.writer.close()


class WeightsAndBiases:
    def __init__(self, wandb: Any, output_dir: str, run_config: dict[str, Any]):
        self.wandb = wandb
        self.run = wandb.init(config=run_config, dir=output_dir)

    def log(self, step: int, scalars: dict[str, float]) -> None:
        self.wandb.log(scalars, step=step)

    def close(self) -> None:
        self.run.finish()


class MLflow:
    def __init__(self, mlflow: Any):
        self.mlflow = mlflow
        self.run = mlflow.start_run()

    def log(self, step: int, scalars: dict[str, float]) -> None:
        # MLflow's metric names allow no "/" on some stores: use "." as its own examples do.
        self.mlflow.log_metrics({name.replace("/", "."): value for name, value in scalars.items()}, step=step)

    def close(self) -> None:
        self.mlflow.end_run()


def start_trackers(config: TrainingConfig) -> tuple[Tracker, ...]:
    """The trackers this run logs to, besides metrics.jsonl; W&B gets the training config as the run's."""
    trackers: list[Tracker] = []
    if config.tensorboard:
        trackers.append(TensorBoard(Path(config.output_dir) / TENSORBOARD_DIR))
    if os.environ.get(WANDB_ENV) and (wandb := _optional_import("wandb", WANDB_ENV)):
        trackers.append(WeightsAndBiases(wandb, config.output_dir, config.model_dump(mode="json", by_alias=True)))
    if os.environ.get(MLFLOW_ENV) and (mlflow := _optional_import("mlflow", MLFLOW_ENV)):
        trackers.append(MLflow(mlflow))
    return tuple(trackers)


def _optional_import(module: str, switched_on_by: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        log.warning("%s is set, but %s is not installed in this image: not logging to it", switched_on_by, module)
        return None
