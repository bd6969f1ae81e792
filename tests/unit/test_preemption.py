"""Preemption's pure parts: a stop signal only sets a flag (and is ignored once the exit code is decided), the
message and exit code it ends in, torchrun's time to let it checkpoint, the shortened hang timeout after it,
and the step every termination message carries. A rank that cannot complete its step after a stop signal:
tests/integration/test_stop_limit.py."""

from __future__ import annotations

import json
import signal

import pytest
import torch.distributed as dist

from scaletrain_trainer.__main__ import write_error
from scaletrain_trainer.contract import wire
from scaletrain_trainer.contract.exit_codes import EXIT_PREEMPTED
from scaletrain_trainer.launch import SHUTDOWN_TIMEOUT_ENV, pod_exit_code, torchrun_env
from scaletrain_trainer.reporting import metrics, preemption
from scaletrain_trainer.reporting.metrics import record_completed_step, write_termination_message
from scaletrain_trainer.reporting.preemption import (
    STOP_SIGNALS,
    Preempted,
    ignore_stop_signals,
    install_handlers,
    received,
    signal_named,
)
from scaletrain_trainer.reporting.watchdog import Watchdog
from scaletrain_trainer.training.distributed import HostMax


@pytest.fixture
def no_signal_yet(monkeypatch):
    """This process as if no stop signal had come, its own handlers back afterwards."""
    monkeypatch.setattr(preemption, "_received", 0)
    handlers = {number: signal.getsignal(number) for number in preemption.STOP_SIGNALS}
    yield
    for number, handler in handlers.items():
        signal.signal(number, handler)


@pytest.fixture
def termination_log(tmp_path, monkeypatch):
    path = tmp_path / "termination-log"
    path.touch()
    monkeypatch.setenv(wire.TERMINATION_LOG_ENV, str(path))
    monkeypatch.setattr(metrics, "_last_completed_step", None)
    return path


def test_a_stop_signal_only_sets_a_flag(no_signal_yet):
    install_handlers()
    signal.raise_signal(signal.SIGINT)  # no KeyboardInterrupt
    assert received() == signal.SIGINT
    signal.raise_signal(signal.SIGTERM)  # and the process lives on
    assert signal_named(received()) == signal.SIGTERM
    assert signal_named(0) is None


def test_once_the_exit_code_is_decided_a_stop_signal_is_ignored(no_signal_yet):
    """Ignored, not noted: Python's finalization keeps an ignored signal ignored, where it gives a handled one its
    default action back (SIGTERM's: to die of it)."""
    install_handlers()
    ignore_stop_signals()
    assert all(signal.getsignal(number) is signal.SIG_IGN for number in STOP_SIGNALS)
    signal.raise_signal(signal.SIGTERM)  # the process lives on
    assert received() == 0


def test_the_ranks_agree_on_the_largest_signal_sigterm_before_sigint():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        assert HostMax("gloo", 60)(int(signal.SIGTERM)) == signal.SIGTERM
        under_nccl = HostMax("nccl", 60)  # a gloo group of its own: no device sync
        assert under_nccl.group is not None and under_nccl(0) == 0
    finally:
        dist.destroy_process_group()
    assert signal.SIGTERM > signal.SIGINT


def test_the_preempted_line_names_the_signal_the_step_and_the_checkpoint():
    assert str(Preempted(21, signal.SIGTERM, "step-00000021")) == (
        "preempted by SIGTERM at step 21: checkpoint step-00000021 saved, exiting 80"
    )
    assert "no checkpoint.dir, nothing saved" in str(Preempted(3, signal.SIGINT, None))


def test_every_termination_message_carries_the_last_completed_step(termination_log):
    write_termination_message({"result": "ConfigError"})  # before training: no step to tell
    assert "step" not in json.loads(termination_log.read_text())
    record_completed_step(12)
    write_error("disk full (ENOSPC)")
    assert json.loads(termination_log.read_text()) == {
        "result": "WriteError",
        "cause": "disk full (ENOSPC)",
        "step": 12,
    }
    write_termination_message({"result": "NonFinite", "firstNonFiniteStep": 9})
    assert json.loads(termination_log.read_text())["step"] == 12
    write_termination_message({"result": "Hang", "step": 11})  # a step of its own stands
    assert json.loads(termination_log.read_text())["step"] == 11


def test_a_preempted_worker_makes_the_pod_exit_80_not_torchruns_1(tmp_path):
    message = tmp_path / "termination-log"
    message.write_text(json.dumps({"result": "Preempted", "step": 20}))
    assert pod_exit_code(1, message) == EXIT_PREEMPTED


def test_torchrun_waits_for_the_trainers_checkpoint_unless_told_otherwise():
    trainer = {wire.CONFIG_ENV: "{}", "PATH": "/bin"}
    assert int(torchrun_env(trainer)[SHUTDOWN_TIMEOUT_ENV]) >= 3600
    assert torchrun_env(trainer | {SHUTDOWN_TIMEOUT_ENV: "45"})[SHUTDOWN_TIMEOUT_ENV] == "45"
    assert SHUTDOWN_TIMEOUT_ENV not in torchrun_env({"PATH": "/bin"})  # a script of one's own: torchrun's 30 s


def test_a_rank_asked_to_stop_gets_three_median_steps_to_complete_its_step(tmp_path):
    automatic, configured = Watchdog(None, str(tmp_path), rank=0), Watchdog(10, str(tmp_path), rank=0)
    assert automatic.stop_limit == 30 and configured.stop_limit == 10  # never longer than the hang timeout
    automatic.step_seconds = [50.0] * 3 + [20.0] * 5  # warm-up steps do not count
    assert automatic.stop_limit == 60
