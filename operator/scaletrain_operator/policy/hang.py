"""Hang detection: a Running gang whose rank 0 promised its next report (staleAfter) and broke the promise by more
than one read's deadline is taken for hung; the gang policy then judges it as a failure (HANG_RESULT). For a
script that pushes its reports, the operator makes the promise for it (statusReports.hangAfterSeconds after the
last report: report_server.py)."""

from __future__ import annotations

from datetime import datetime

from ..api.conditions import JobPhase
from ..api.job import ScaleTrainJob
from ..api.timestamps import timestamp


def broken_promise(job: ScaleTrainJob, gang_generation: int, read_seconds: float) -> datetime | None:
    """When rank 0 of the running gang promised its next progress report by (progress.staleAfter: the
    trainer's hang timeout plus a logging interval from its last report), if the operator read rank 0's
    answer after that and it still held the promise: the trainer itself says it made no progress in time
    (its server answers from its own thread while the training loop is stuck). Else None.

    Only a promise of this very gang counts (progress.generation), whatever the status's phase says: a
    lost status write or an operator restart must not hold a new gang to an old gang's promise. And only
    one read after the promise ran out: time alone proves nothing, since progress is copied in only while
    the operator runs, reaches rank 0 and can write the status. A read takes up to `read_seconds`, and the
    answer may come from any moment in it. An unreadable endpoint is ProgressUnreachable (housekeeping_decisions.py),
    never a hang. Before its first report (start-up, resuming from a checkpoint), none: the trainer's own
    watchdog and collective timeouts cover that."""
    status = job.status
    progress = status.progress if status is not None else None
    if status is None or status.phase != JobPhase.RUNNING or progress is None or progress.generation != gang_generation:
        return None
    if progress.stale_after is None or progress.read_at is None:
        return None
    return progress.stale_after if promise_broken(progress.stale_after, progress.read_at, read_seconds) else None


def promise_broken(stale_after: datetime, read_at: datetime, read_seconds: float) -> bool:
    """Whether an answer read at `read_at` that still holds the promise `stale_after` proves it broken: read after it
    ran out by more than a read's deadline (`read_seconds`; the answer may come from any moment in the read)."""
    return (read_at - stale_after).total_seconds() >= read_seconds


def stalled_message(job: ScaleTrainJob, due: datetime) -> str:
    progress = job.status.progress if job.status else None
    step = progress.step if progress else "?"
    if progress is not None and progress.reported_at is not None:  # a script's pushed reports (report_server.py)
        return (
            f"the script reported nothing since {timestamp(progress.reported_at)} (step {step}) and was due to by "
            f"{timestamp(due)} (statusReports.hangAfterSeconds): the gang is taken for hung"
        )
    return (
        f"rank 0 reported no progress since step {step} and was due to by {timestamp(due)} (its hang timeout "
        "plus a logging interval): the gang is taken for hung"
    )
