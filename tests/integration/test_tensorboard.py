"""TensorBoard event files (reporting/tracking.py), written through rank 0's reporter, which serves its
progress endpoint on a real port meanwhile: every logged number at its step."""

from __future__ import annotations

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from scaletrain_testing.tiny_training import training_config
from scaletrain_testing.trainer_runs import free_port
from scaletrain_trainer.reporting.metrics import MetricsReporter
from scaletrain_trainer.reporting.tracking import start_trackers


def test_tensorboard_files_hold_every_logged_number_at_its_step(tmp_path):
    trackers = start_trackers(training_config(tmp_path, tensorboard=True))
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
