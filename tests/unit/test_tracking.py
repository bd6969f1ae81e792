"""Experiment tracking (tracking.py): TensorBoard event files, and W&B / MLflow switched on by their env vars."""

from __future__ import annotations

import logging
import sys
import types

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from scaletrain_testing.trainer_runs import free_port
from scaletrain_trainer.contract.config import parse_training_config
from scaletrain_trainer.contract.validation import ProblemsError
from scaletrain_trainer.reporting.metrics import MetricsReporter
from scaletrain_trainer.reporting.tracking import start_trackers


def _config(tmp_path, **fields):
    return parse_training_config({"globalBatchSize": 8, "microBatchSize": 2, "outputDir": str(tmp_path)} | fields)


def test_tensorboard_files_hold_every_logged_number_at_its_step(tmp_path):
    trackers = start_trackers(_config(tmp_path, tensorboard=True))
    reporter = MetricsReporter(str(tmp_path), free_port(), max_steps=20, enabled=True, trackers=trackers)
    try:
        reporter.log({"step": 10, "loss": 2.5, "lr": 0.001, "skipped": False}, eta_seconds=1.0, next_report_within=9)
        reporter.log_eval(10, 2.75)
        reporter.log({"step": 20, "loss": 2.0, "lr": 0.0005}, eta_seconds=0.0, next_report_within=9)
    finally:
        reporter.close()
    events = EventAccumulator(str(tmp_path / "tensorboard")).Reload()
    assert sorted(events.Tags()["scalars"]) == ["eval/loss", "train/loss", "train/lr"]  # booleans are no scalars
    assert [(e.step, e.value) for e in events.Scalars("train/loss")] == [(10, 2.5), (20, 2.0)]
    assert [(e.step, e.value) for e in events.Scalars("eval/loss")] == [(10, 2.75)]


def test_no_tracker_unless_switched_on(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert start_trackers(_config(tmp_path)) == ()
    assert not (tmp_path / "tensorboard").exists()


def test_tensorboard_without_its_package_is_a_config_error_naming_the_field(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as if not installed
    with pytest.raises(ProblemsError, match=r"tensorboard: needs the tensorboard package: pip install"):
        start_trackers(_config(tmp_path, tensorboard=True))


class Recorder(types.ModuleType):
    """Stands in for the wandb or mlflow module, recording the calls the tracker makes."""

    def __init__(self, name):
        super().__init__(name)
        self.calls = []

    def __getattr__(self, attribute):
        def call(*args, **kwargs):
            self.calls.append((attribute, args, kwargs))
            return self

        return call


def test_wandb_and_mlflow_log_where_their_env_vars_say_and_are_skipped_with_a_warning_when_absent(
    tmp_path, monkeypatch, caplog
):
    wandb, mlflow = Recorder("wandb"), Recorder("mlflow")
    monkeypatch.setitem(sys.modules, "wandb", wandb)
    monkeypatch.setitem(sys.modules, "mlflow", mlflow)
    monkeypatch.setenv("WANDB_PROJECT", "llm")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow:5000")
    config = _config(tmp_path)
    for tracker in start_trackers(config):
        tracker.log(10, {"train/loss": 2.5})
        tracker.close()
    assert [name for name, _, _ in wandb.calls] == ["init", "log", "finish"]
    assert wandb.calls[0][2]["config"]["globalBatchSize"] == 8
    assert wandb.calls[1][1:] == (({"train/loss": 2.5},), {"step": 10})
    assert [name for name, _, _ in mlflow.calls] == ["start_run", "log_metrics", "end_run"]
    assert mlflow.calls[1][1:] == (({"train.loss": 2.5},), {"step": 10})

    monkeypatch.setitem(sys.modules, "wandb", None)
    monkeypatch.setitem(sys.modules, "mlflow", None)
    with caplog.at_level(logging.WARNING):
        assert start_trackers(config) == ()
    assert "WANDB_PROJECT is set, but wandb is not installed" in caplog.text
    assert "MLFLOW_TRACKING_URI is set, but mlflow is not installed" in caplog.text
