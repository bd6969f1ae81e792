"""The benchmarks still run (smallest settings). Their speed targets are read from their reports,
not asserted here; the memory ratios are byte counts, not timings, so they are checked."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

from scaletrain_testing.jobs import REPO


def _bench(script: str, tmp_path, *args: str) -> dict:
    command = [sys.executable, str(REPO / "bench" / script), "--results-dir", str(tmp_path), *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((tmp_path / script.replace(".py", ".json")).read_text())


def test_memory_benchmark_meets_its_byte_targets(tmp_path):
    report = _bench("memory.py", tmp_path)
    assert report["fsdpOverDdp"] <= 0.6
    assert report["accumulationOverSingle"] < 0.35  # a quarter of the micro-batch, about a quarter of the memory


def test_step_time_benchmark_runs(tmp_path):
    report = _bench("step_time.py", tmp_path, "--rounds", "1", "--steps", "20")
    assert set(report["medianStepSeconds"]) == {"scaletrain", "handwritten", "accelerate"}
    assert all(seconds > 0 for seconds in report["medianStepSeconds"].values())
    assert [(r["variant"], r["baseline"]) for r in report["ratios"]] == [
        ("scaletrain", "handwritten"),
        ("scaletrain", "accelerate"),
    ]


def test_every_step_time_suite_trains_valid_configs(monkeypatch):
    """The compile suite is not run here (its compile alone takes a minute); its configs are checked."""
    from scaletrain_trainer.contract.config import parse_training_config

    monkeypatch.syspath_prepend(str(REPO / "bench"))
    step_time = importlib.import_module("step_time")
    for suite in step_time.SUITES.values():
        for variant in suite.variants.values():
            parse_training_config(suite.training | variant.overrides)


def test_the_checkpoint_blocking_benchmark_trains_valid_configs(monkeypatch):
    """Not run here (its 6 runs of a width-256 GPT take minutes); its configs are checked."""
    from scaletrain_trainer.contract.config import parse_training_config

    monkeypatch.syspath_prepend(str(REPO / "bench"))
    checkpoint_blocking = importlib.import_module("checkpoint_blocking")
    for asynchronous in checkpoint_blocking.VARIANTS.values():
        checkpoint = {"dir": "/tmp/checkpoints", "everySteps": checkpoint_blocking.EVERY_STEPS, "async": asynchronous}
        config = parse_training_config(checkpoint_blocking.TRAINING | {"checkpoint": checkpoint})
        assert config.checkpoint.asynchronous is asynchronous


def test_gpu_benchmark_code_path_runs_on_cpu(tmp_path):
    report = _bench("gpu.py", tmp_path, "--tiny", "--allow-cpu")
    assert set(report["speed"]) == {"124M eager", "124M compiled", "1.3B compiled"}
    assert all(row["ratio"] > 0 for row in report["speed"].values())
    assert len(report["checkpoints"]["async"]["blockedSeconds"]) == 3 and report["checkpoints"]["asyncOverSync"] > 0
    assert report["precision"]["bf16TokensPerSecondOverFp32"] > 0
    assert (tmp_path / "gpu.md").read_text().startswith("cpu, torch ")


def test_hostile_inputs_are_all_refused_without_a_traceback_within_the_memory_target(tmp_path):
    report = _bench("hostile_inputs.py", tmp_path)
    assert report["cases"] >= 150 and report["tracebacks"] == [] and report["accepted"] == []
    assert report["largestPeak"]["peakBytes"] <= 300 * 2**20  # bytes, not a timing: the seconds are in the report


def test_operator_scale_benchmark_runs(tmp_path, control_plane):
    """In this process, on the session's control plane: a second one would only add its start-up."""
    spec = importlib.util.spec_from_file_location("operator_scale", REPO / "bench" / "operator_scale.py")
    operator_scale = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(operator_scale)
    operator_scale.main(["--jobs", "5", "--results-dir", str(tmp_path)], control_plane=control_plane)
    report = json.loads((tmp_path / "operator_scale.json").read_text())
    creation, restart = report["creation"], report["restart"]
    assert report["jobs"] == 5 and creation["apiRequestsPerJob"] >= 3  # at least 2 creates and a status patch
    assert creation["readsPerJob"] == 0  # the cache serves creating jobs
    assert creation["seconds"]["p95"] > 0 and creation["operatorRssBytes"] > 0
    # A restart is confirmed by a fresh read first; it deletes the gang's Job and creates the next one.
    assert (
        restart["apiRequestsByKind"]["delete jobs.batch"] == 5
        and restart["apiRequestsByKind"]["create jobs.batch"] == 5
    )
    assert restart["seconds"]["p95"] > 0 and restart["reconcilesPerJob"] >= 1


def test_gang_restart_benchmark_restarts_in_place_with_two_kubelet_writes_per_pod(tmp_path, control_plane):
    """In this process, on the session's control plane. In place, no pod is created or deleted: each pod's status
    is written twice (killed, running again) and the Job patched once; recreated, every pod is made anew."""
    spec = importlib.util.spec_from_file_location("gang_restart", REPO / "bench" / "gang_restart.py")
    gang_restart = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gang_restart)
    gang_restart.main(["--pods", "6", "--rounds", "1", "--results-dir", str(tmp_path)], control_plane=control_plane)
    report = json.loads((tmp_path / "gang_restart.json").read_text())
    (in_place,), (recreated,) = report["restarts"]["InPlace"], report["restarts"]["Recreate"]
    assert in_place["podsCreated"] == 0 and "delete pods" not in in_place["writes"]
    assert in_place["writes"]["patch pods/status"] == 2 * 6 and in_place["writes"]["patch jobs.batch"] == 1
    assert recreated["podsCreated"] == 6 and recreated["writes"]["create jobs.batch"] == 1
    assert 0 < in_place["allToldSeconds"] <= in_place["allRestartedSeconds"] <= in_place["seconds"]
    assert 0 < recreated["seconds"] and "allToldSeconds" not in recreated


def test_status_report_benchmark_runs(tmp_path):
    report = _bench("status_reports.py", tmp_path, "--reports", "20", "--hogs", "4", "--rounds", "1")
    assert set(report["medians"]) == {"alone", "besideHogs"}
    assert all(run["reportsPerSecond"] > 0 and run["cpuMsPerReport"] >= 0 for run in report["medians"].values())


def test_restart_signal_benchmark_runs(tmp_path):
    report = _bench("restart_signal.py", tmp_path, "--pods", "4", "--rounds", "1")
    assert report["runs"][0]["told"] == 4 and report["medianLastToldSeconds"] > 0


def test_recovery_benchmark_runs(tmp_path):
    report = _bench("recovery.py", tmp_path, "--rounds", "1", "--crashes", "1")
    for strategy in ("InPlace", "Recreate"):
        (restart,) = report["restarts"][strategy]
        assert 0 < restart["toNewProcess"] < restart["recovery"] and restart["floor"] > 0


def test_object_storage_benchmark_runs(tmp_path):
    report = _bench("object_storage.py", tmp_path, "--megabytes", "64", "--rounds", "1")
    assert set(report["medians"]) == {"disk", "s3"}
    assert all(m["saveMBps"] > 0 and m["loadMBps"] > 0 for m in report["medians"].values())
    assert report["medians"]["s3"]["requestsPerSave"]["GetObject"] > 0  # the read-back of what was written


def test_lora_benchmark_meets_its_state_byte_target(tmp_path):
    report = _bench("lora.py", tmp_path, "--rounds", "1", "--steps", "2")
    assert report["target"]["met"], report["loraVsFull"]  # byte counts: not a timing
    assert report["variants"]["lora"]["trainedParameters"] < report["variants"]["full"]["trainedParameters"] / 10


def test_steady_state_benchmark_writes_a_running_jobs_status_once_a_write_interval(tmp_path, control_plane):
    """In this process, on the session's control plane: 3 Running jobs read every second for 30 s; every read is
    written with a write interval of 0, one in 10 s with 10."""
    spec = importlib.util.spec_from_file_location("steady_state", REPO / "bench" / "steady_state.py")
    steady_state = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(steady_state)
    arguments = ["--jobs", "3", "--minutes", "0.5", "--read-interval", "1", "--write-intervals", "10", "0"]
    steady_state.main([*arguments, "--results-dir", str(tmp_path)], control_plane=control_plane)
    every_ten, every_read = json.loads((tmp_path / "steady_state.json").read_text())["runs"]
    assert every_ten["statusWritesPerJobMinute"] <= 60 / 10 + 2, every_ten  # one a window's start may add
    assert every_read["statusWritesPerJobMinute"] >= 30, every_read  # about 60: one a read
    assert every_read["progressReads"] >= 3 * 15
