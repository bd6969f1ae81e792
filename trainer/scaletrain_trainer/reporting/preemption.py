"""Preemption: a SIGTERM (an eviction, a preemption, a suspension: the kubelet's stop) or a SIGINT (Ctrl-C
under run-local) asks the run to stop. Every rank finishes its step, saves a checkpoint at it and exits
EXIT_PREEMPTED, so a restarted gang loses no work.

The handler only notes the signal: the work waits for the next step boundary, where the ranks agree,
with one tiny all-reduce, whether any of them was asked to stop (a signal may reach one rank, or the
ranks at different moments, and every rank must stop after the same step to save it together).
Torch-free, as the entry point is until the config is valid: the handlers go in before anything else.
"""

from __future__ import annotations

import signal
from types import FrameType

from ..contract.exit_codes import EXIT_PREEMPTED

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

_received = 0  # the number of the last stop signal this process received, 0 for none


def install_handlers() -> None:
    """Note the stop signals instead of dying of them (SIGTERM) or raising KeyboardInterrupt (SIGINT)
    wherever the main thread happens to be. Installed before anything forks, so that data-loader
    workers, which torchrun signals with their rank (its process group), are not killed either."""
    for number in STOP_SIGNALS:
        signal.signal(number, _note)


def ignore_stop_signals() -> None:
    """Once the process's exit code is decided, ignore the stop signals instead of noting them. Python's
    finalization gives every signal it handles back its default action, which for SIGTERM is to die of it, and
    torchrun sends SIGTERM to the other workers as soon as one exits with a code other than 0 (80 included):
    a rank still finalizing when its peer exited first would end as -15, not with its own code. An ignored
    signal stays ignored through the finalization."""
    for number in STOP_SIGNALS:
        signal.signal(number, signal.SIG_IGN)


def _note(number: int, _frame: FrameType | None) -> None:
    global _received
    _received = number  # only a flag: a save or a collective must not be interrupted here


def received() -> int:
    """The number of the stop signal this process received, 0 for none: what the ranks agree on, with
    the largest (SIGTERM's) winning."""
    return _received


def signal_named(number: int) -> signal.Signals | None:
    return signal.Signals(number) if number else None


class Preempted(Exception):
    """Every rank stopped after `step` for `signal`, with the checkpoint `checkpoint` (its directory name;
    None without checkpoint.dir) saved at it; the trainer then exits EXIT_PREEMPTED."""

    def __init__(self, step: int, stop_signal: signal.Signals, checkpoint: str | None):
        saved = f"checkpoint {checkpoint} saved" if checkpoint else "no checkpoint.dir, nothing saved"
        super().__init__(f"preempted by {stop_signal.name} at step {step}: {saved}, exiting {EXIT_PREEMPTED}")
        self.step, self.signal, self.checkpoint = step, stop_signal, checkpoint
