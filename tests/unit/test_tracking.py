"""Experiment tracking (tracking.py): W&B / MLflow switched on by their env vars, TensorBoard only with its
package. The TensorBoard files a run writes: tests/integration/test_tensorboard.py."""

from __future__ import annotations

import logging
import sys
import types

import pytest

from scaletrain_testing.tiny_training import training_config
from scaletrain_trainer.contract.validation import ProblemsError
from scaletrain_trainer.reporting.tracking import start_trackers


def test_no_tracker_unless_switched_on(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert start_trackers(training_config(tmp_path)) == ()
    assert not (tmp_path / "tensorboard").exists()


def test_tensorboard_without_its_package_is_a_config_error_naming_the_field(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as if not installed
    with pytest.raises(ProblemsError, match=r"tensorboard: needs the tensorboard package: pip install"):
        start_trackers(training_config(tmp_path, tensorboard=True))


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
    config = training_config(tmp_path)
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
