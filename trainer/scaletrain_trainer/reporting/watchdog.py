"""A hang watchdog: a rank that completes no optimizer step for too long dumps its stacks and exits.

A stuck rank (a deadlocked data loader, a wedged device, a peer stopped by the kernel) leaves every
other rank waiting in a collective until its timeout, 10 minutes by default, while the job looks
Running. The watchdog thread notices first. It writes every thread's Python stack (faulthandler) to
`outputDir/hang-rank<R>.txt`, headed by the step and what the rank was doing, records the same in the
termination message, and ends the process with EXIT_HANG.

What the rank was doing tells the victims from the culprit (exit_codes.waited_on_peers): a rank
stuck in a phase that waits on its peers (a training step's collectives, a log step's reduction)
was most likely waiting for the one that stopped; the gang policy never names such a pod as the root
cause while another pod is stuck or stopped in a phase of its own.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import signal
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from ..contract.exit_codes import EXIT_HANG, HANG_RESULT
from . import preemption
from .metrics import write_termination_message

log = logging.getLogger(__name__)

MIN_AUTO_TIMEOUT = 300.0  # seconds: the default's floor, above any normal hiccup (a slow file system, GC)
AUTO_FACTOR = 10  # the default timeout is this many median steps, when that is longer than the floor
WARMUP_STEPS = 3  # the first steps (compilation, allocator warm-up) are not typical step times
# After a stop signal a rank must complete its step within this many median steps (at least
# STOP_MIN_SECONDS) to save and exit. One that does not (stuck in a collective with a peer that died)
# would hold its pod, and torchrun, until the hang timeout; it exits as the signal would have ended it.
STOP_FACTOR = 3
STOP_MIN_SECONDS = 30.0


class Watchdog:
    """Started once the run is set up; `step_done` after each optimizer step, `phase` around the work."""

    def __init__(self, timeout_seconds: int | None, output_dir: str, rank: int):
        self.configured = float(timeout_seconds) if timeout_seconds else None
        self.path = Path(output_dir) / f"hang-rank{rank}.txt"
        self.rank = rank
        self.step, self.doing, self.waits_on_peers = 0, "starting", False
        self.last_progress = time.monotonic()
        self.step_seconds: list[float] = []
        self.paused = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="scaletrain-watchdog", daemon=True)

    @property
    def typical_step_seconds(self) -> float:
        """The median step time after the warm-up steps (0 before there are any)."""
        typical = self.step_seconds[WARMUP_STEPS:]
        return statistics.median(typical) if typical else 0.0

    @property
    def timeout(self) -> float:
        if self.configured is not None:
            return self.configured
        return max(MIN_AUTO_TIMEOUT, AUTO_FACTOR * self.typical_step_seconds)

    @property
    def stop_limit(self) -> float:
        """How long a rank asked to stop (preemption.py) may go without completing a step."""
        return min(self.timeout, max(STOP_MIN_SECONDS, STOP_FACTOR * self.typical_step_seconds))

    def start(self) -> Watchdog:
        self.last_progress = time.monotonic()
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()

    def step_done(self, step: int) -> None:
        now = time.monotonic()
        self.step_seconds.append(now - self.last_progress)
        del self.step_seconds[:-1000]  # a recent window is what the median should reflect
        self.step, self.last_progress = step, now

    @contextlib.contextmanager
    def phase(self, doing: str, waits_on_peers: bool) -> Iterator[None]:
        """Label what the rank does now (kept to a few phases: labelling costs nothing, but is coarse)."""
        self.doing, self.waits_on_peers = doing, waits_on_peers
        yield

    @contextlib.contextmanager
    def paused_for(self, doing: str) -> Iterator[None]:
        """Unwatched work that may legitimately outlast a step by far (a checkpoint save of a large model);
        its collectives still have distributedTimeoutSeconds."""
        self.paused, self.doing = True, doing
        try:
            yield
        finally:
            self.paused, self.last_progress = False, time.monotonic()

    def _watch(self) -> None:
        while not self._stop.wait(min(1.0, self.stop_limit / 10)):
            stalled = time.monotonic() - self.last_progress
            if self.paused:
                continue
            if stalled > self.timeout:
                self._give_up(stalled)
            if (stop_signal := preemption.received()) and stalled > self.stop_limit:
                self._stop_unsaved(stop_signal, stalled)

    def _stop_unsaved(self, stop_signal: int, stalled: float) -> None:
        """End a rank that was asked to stop but cannot reach a step boundary to save: as the signal would
        have, writing no result (a peer's, or a hang's, says more about the pod than this one would)."""
        log.error(
            "rank %d: stopped by %s, but no optimizer step completed for %.0f s after step %d, while %s: "
            "exiting without a checkpoint",
            self.rank,
            signal.Signals(stop_signal).name,
            stalled,
            self.step,
            self.doing,
        )
        os._exit(128 + stop_signal)  # the shell's code for a process the signal ended

    def _give_up(self, stalled: float) -> None:
        summary = (
            f"rank {self.rank}: no optimizer step completed for {stalled:.0f} s (hang timeout {self.timeout:.0f} s) "
            f"after step {self.step}, while {self.doing}"
        )
        log.error("%s; stacks in %s", summary, self.path)
        with contextlib.suppress(OSError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("w") as dump:
                dump.write(summary + "\n\n")
                dump.flush()
                faulthandler.dump_traceback(dump, all_threads=True)
        # Its step is the last completed one, as in every termination message (metrics.with_step).
        write_termination_message({"result": HANG_RESULT, "doing": self.doing, "waitingOnPeers": self.waits_on_peers})
        os._exit(EXIT_HANG)  # the main thread is stuck: only a hard exit ends the process
