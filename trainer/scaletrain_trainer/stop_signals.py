"""A pod's stop signals, passed on to the process its main process runs (launch.py's torchrun, agent.py's
workload)."""

from __future__ import annotations

import signal
import subprocess
import threading

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class StopSignals:
    """The pod's stop signals, passed on to the child. Handled from the start: the main process is the
    container's PID 1, and the kernel drops a signal PID 1 has no handler for, so one that came before
    the child ran would be lost and the pod would train on until SIGKILL. One that came before is kept:
    the child is then not started, or is sent it as soon as it runs."""

    def __init__(self) -> None:
        self.child: subprocess.Popen | None = None
        self.received: int | None = None
        self.stopped = threading.Event()  # set by the first: a wait for anything else can end
        for number in FORWARDED_SIGNALS:
            signal.signal(number, self._handle)

    def _handle(self, number: int, _frame: object) -> None:
        self.received = self.received or number
        self.stopped.set()
        if self.child is not None:
            self.child.send_signal(number)

    def forward_to(self, child: subprocess.Popen) -> None:
        self.child = child
        if self.received is not None:  # it came while the child was being started
            child.send_signal(self.received)
