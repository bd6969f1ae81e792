"""The pod launcher's stop signals (launch.py): handled from its first line, since a signal the container's
PID 1 has no handler for is dropped by the kernel."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from scaletrain_trainer import launch
from scaletrain_trainer.contract.validation import ProblemsError
from scaletrain_trainer.stop_signals import FORWARDED_SIGNALS, StopSignals


@pytest.fixture(autouse=True)
def restored_handlers():
    before = {number: signal.getsignal(number) for number in FORWARDED_SIGNALS}
    yield
    for number, handler in before.items():
        signal.signal(number, handler)


class Torchrun:
    def __init__(self):
        self.sent: list[int] = []

    def send_signal(self, number: int) -> None:
        self.sent.append(number)


def deliver(number: int) -> None:
    """What the kernel does on a signal: call this process's handler, here in the test's own thread."""
    signal.getsignal(number)(number, None)


def test_a_signal_before_torchrun_runs_is_kept_and_sent_when_it_does():
    stop_signals = StopSignals()
    deliver(signal.SIGTERM)
    torchrun = Torchrun()
    stop_signals.forward_to(torchrun)
    deliver(signal.SIGINT)
    assert torchrun.sent == [signal.SIGTERM, signal.SIGINT]


def test_a_stop_during_preflight_ends_the_pod_without_starting_torchrun(monkeypatch):
    monkeypatch.setenv("SCALETRAIN_CONFIG", '{"globalBatchSize": 8, "microBatchSize": 8}')
    monkeypatch.setattr(launch, "preflight", lambda environ: deliver(signal.SIGTERM))
    monkeypatch.setattr(subprocess, "Popen", lambda *args, **kwargs: pytest.fail("torchrun was started"))
    assert launch.main([]) == 128 + signal.SIGTERM


def test_preflight_leaves_an_object_stores_data_file_to_the_trainer_and_checks_the_pods_own(tmp_path):
    config = '{"globalBatchSize": 8, "microBatchSize": 8, "data": {"source": "text", "path": "%s"}}'
    launch.preflight({"SCALETRAIN_CONFIG": config % "s3://team-a/corpus/train.txt"})
    with pytest.raises(ProblemsError, match=r"data\.path: .* is not a readable file in this pod"):
        launch.preflight({"SCALETRAIN_CONFIG": config % (tmp_path / "missing.txt")})


def error_file_at(log_dir, attempt: int, rank: int, written_ns: int):
    path = log_dir / "run_abc" / f"attempt_{attempt}" / str(rank) / "error.json"
    path.parent.mkdir(parents=True)
    path.write_text("{}")
    os.utime(path, ns=(written_ns, written_ns))
    return path


def test_the_first_error_is_the_earliest_written_in_the_last_attempt_not_torchruns_tie_break(tmp_path):
    """torchrun's error timestamps are whole seconds, and a tie went to rank 0, whose error was only that its
    peer's connection closed."""
    chosen = tmp_path / "error.json"  # torchrun's copy of rank 0's
    log_dir = tmp_path / "workers"
    error_file_at(log_dir, 0, 0, written_ns=1_000)  # an earlier attempt's
    error_file_at(log_dir, 1, 0, written_ns=5_000_000_500)  # rank 0: "Connection closed by peer"
    culprit = error_file_at(log_dir, 1, 1, written_ns=5_000_000_000)
    assert launch.first_error(chosen, log_dir) == culprit
    assert launch.first_error(chosen, tmp_path / "none") == chosen  # no worker wrote one: torchrun's
