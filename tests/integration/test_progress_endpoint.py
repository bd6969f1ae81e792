"""Rank 0's progress endpoint (reporting/metrics.py), served on a real port in this process: JSON and
Prometheus, evaluations, a diverged loss, and a port already taken."""

from __future__ import annotations

import json
import urllib.request
from datetime import datetime, timedelta

import pytest

from scaletrain_testing.trainer_runs import free_port
from scaletrain_trainer.contract import wire
from scaletrain_trainer.reporting.metrics import MetricsReporter


def test_progress_endpoint_serves_json_and_prometheus(tmp_path):
    port = free_port()
    reporter = MetricsReporter(str(tmp_path), port, max_steps=100, enabled=True)
    try:
        reporter.log(
            {
                "step": 10,
                "loss": 2.5,
                "samplesPerSecond": 40.0,
                "tokensPerSecond": 640.0,
                "tflopsPerDevice": 0.5,
                "mfu": 0.25,
            },
            eta_seconds=9.0,
            next_report_within=30.0,
        )
        progress = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/progress", timeout=10))
        assert progress | {"updatedAt": None, "staleAfter": None} == {
            "step": 10,
            "maxSteps": 100,
            "loss": 2.5,
            "samplesPerSecond": 40.0,
            "tokensPerSecond": 640.0,
            "tflopsPerDevice": 0.5,
            "mfu": 0.25,
            "etaSeconds": 9.0,
            "resumedFromStep": 0,
            "checkpointStep": 0,
            "updatedAt": None,
            "staleAfter": None,
        }
        # The next report is promised 30 s on (rounded up, plus a second: the timestamps are whole seconds).
        promised = datetime.fromisoformat(progress["staleAfter"]) - datetime.fromisoformat(progress["updatedAt"])
        assert promised == timedelta(seconds=31)
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert "scaletrain_step 10\n" in metrics and "# TYPE scaletrain_loss gauge" in metrics
        assert "scaletrain_tflops_per_device 0.5\n" in metrics and "scaletrain_mfu 0.25\n" in metrics
    finally:
        reporter.close()
    assert json.loads((tmp_path / "metrics.jsonl").read_text())["loss"] == 2.5


def test_an_evaluation_is_a_record_of_its_own_and_served_as_eval_loss(tmp_path):
    port = free_port()
    reporter = MetricsReporter(str(tmp_path), port, max_steps=100, enabled=True)
    try:
        reporter.log({"step": 10, "loss": 2.5}, eta_seconds=9.0, next_report_within=30.0)
        reporter.log_eval(10, 2.75)
        progress = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/progress", timeout=10))
        assert progress["evalLoss"] == 2.75 and progress["loss"] == 2.5
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert "scaletrain_eval_loss 2.75\n" in metrics
    finally:
        reporter.close()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert records[1] == {"step": 10, "evalLoss": 2.75}


def test_a_diverged_loss_is_served_as_strict_json_null_and_flagged(tmp_path):
    port = free_port()
    reporter = MetricsReporter(str(tmp_path), port, max_steps=100, enabled=True)
    try:
        reporter.log(
            {"step": 10, "loss": float("nan"), "samplesPerSecond": float("inf")},
            eta_seconds=9.0,
            next_report_within=30.0,
        )
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/progress", timeout=10).read().decode()
        progress = json.loads(body, parse_constant=lambda name: pytest.fail(f"{name} is not JSON"))
        assert progress["loss"] is None and progress["lossFinite"] is False and progress["samplesPerSecond"] is None
    finally:
        reporter.close()


def test_a_busy_port_does_not_stop_training(tmp_path):
    port = free_port()
    first = MetricsReporter(str(tmp_path / "a"), port, max_steps=10, enabled=True)
    second = MetricsReporter(str(tmp_path / "b"), port, max_steps=20, enabled=True)
    try:
        second.log({"step": 1, "loss": 1.0}, eta_seconds=1.0, next_report_within=30.0)
        assert json.loads((tmp_path / "b" / "metrics.jsonl").read_text())["step"] == 1
        served = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/progress", timeout=10))
        assert served["maxSteps"] == 10  # the port still belongs to the first
    finally:
        first.close()
        second.close()


def test_every_step_record_field_wire_names_is_served_and_each_gauge_it_names_is_exported(tmp_path):
    """What the reporter copies from a step record and exports comes from contract/wire.py alone."""
    port = free_port()
    reporter = MetricsReporter(str(tmp_path), port, max_steps=100, enabled=True)
    try:
        reporter.log(
            {name: 1 for name in wire.FROM_STEP_RECORD} | {"notAField": 1}, eta_seconds=9.0, next_report_within=30
        )
        reporter.log_eval(1, 2.0)
        progress = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/progress", timeout=10))
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    finally:
        reporter.close()
    assert set(wire.FROM_STEP_RECORD) <= set(progress) and "notAField" not in progress
    exported = [field for field in wire.PROGRESS_FIELDS if field.gauge is not None and field.name in progress]
    assert {"step", "maxSteps", "evalLoss", "etaSeconds"} <= {field.name for field in exported}
    for field in exported:
        assert f"# TYPE {field.gauge.name} gauge\n{field.gauge.name} {progress[field.name]}\n" in metrics


def test_the_first_answer_already_says_where_the_run_resumed_from(tmp_path):
    """The operator may read the endpoint as soon as it listens: before the first step is logged, the answer
    says the step the run resumed from and the checkpoints set aside, as every later one does (a node-tier
    run once read an answer without resumedFromStep)."""
    port = free_port()
    reporter = MetricsReporter(
        str(tmp_path), port, max_steps=100, enabled=True, resumed_from_step=20, set_aside=["step-30.corrupt"]
    )
    try:
        progress = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/progress", timeout=10))
    finally:
        reporter.close()
    assert progress == {
        "step": 20,
        "maxSteps": 100,
        "resumedFromStep": 20,
        "checkpointStep": 20,
        "checkpointsSetAside": ["step-30.corrupt"],
    }
