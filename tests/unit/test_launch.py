"""The pod launcher's stop signals (launch.py): handled from its first line, since a signal the container's
PID 1 has no handler for is dropped by the kernel."""

from __future__ import annotations

import signal
import subprocess

import pytest

from scaletrain_trainer import launch


@pytest.fixture(autouse=True)
def restored_handlers():
    before = {number: signal.getsignal(number) for number in launch.FORWARDED_SIGNALS}
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
    stop_signals = launch.StopSignals()
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
