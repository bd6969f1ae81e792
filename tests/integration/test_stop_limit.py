"""Preemption's stop limit, in a process of its own: a rank asked to stop that cannot complete its step
(here: one that never ends) exits as the signal would have, once the watchdog's stop limit has passed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from scaletrain_trainer.contract import wire


def test_a_rank_asked_to_stop_that_cannot_complete_its_step_exits_as_the_signal_would_have(tmp_path):
    """Stuck (here: a step that never ends) after a SIGTERM: 143 within the stop limit, no result written."""
    script = f"""
import signal, time
from scaletrain_trainer.reporting import preemption, watchdog
watchdog.STOP_MIN_SECONDS = 0.5
preemption.install_handlers()
watchdog.Watchdog(60, {str(tmp_path)!r}, rank=0).start()
signal.raise_signal(signal.SIGTERM)
time.sleep(30)
"""
    termination_log = tmp_path / "termination-log"
    termination_log.touch()
    env = os.environ | {wire.TERMINATION_LOG_ENV: str(termination_log)}
    started = time.monotonic()
    stopped = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=20)
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr
    assert time.monotonic() - started < 15
    assert "stopped by SIGTERM, but no optimizer step completed" in stopped.stderr
    assert termination_log.read_text() == ""
