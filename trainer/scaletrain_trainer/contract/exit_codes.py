"""The trainer's exit codes: what a pod's exit code means. The operator, run-local and the tests import
them from here, so the code a trainer produces and the code its supervisors read cannot drift apart.
Torch-free on purpose: the operator imports it.

Each failure the trainer names also has a "result" in the termination message, because torchrun
reports any failed worker as exit code 1: the pod launcher (launch.py) maps a worker's result back to
its code, and the gang policy reads either.
"""

from __future__ import annotations

import errno
import json
from collections.abc import Iterator
from typing import Literal

EXIT_CONFIG_ERROR = 78  # EX_CONFIG from sysexits.h: a bad config, which no retry can fix
EXIT_WRITE_ERROR = 74  # EX_IOERR: the disk is full or read-only, or a file hit its size limit
EXIT_NON_FINITE = 79  # the loss or the gradients became NaN or infinite: the run diverged (loop.NonFinite)
EXIT_HANG = 75  # EX_TEMPFAIL: no step completed within the hang timeout (watchdog.py); a restart may fix it
EXIT_PREEMPTED = 80  # stopped from outside (SIGTERM: a preemption, an eviction, a suspension) after a checkpoint
# EX_NOPERM: checkpoint.dir's object store refused the trainer at start (a wrong key, no bucket, no answer, no
# right to write): nothing a restart changes (CheckpointStorageError)
EXIT_STORAGE_ERROR = 77
# Not a failure: the operator restarts the gang in place (wire.RESTART), and the pod's restart rule, which
# matches this code alone, makes the kubelet restart every container of the pod where it stands.
EXIT_RESTART_IN_PLACE = 81

Result = Literal["ConfigError", "WriteError", "NonFinite", "Hang", "Preempted", "CheckpointStorageError"]
CONFIG_ERROR_RESULT: Result = "ConfigError"
WRITE_ERROR_RESULT: Result = "WriteError"
NON_FINITE_RESULT: Result = "NonFinite"
HANG_RESULT: Result = "Hang"
PREEMPTED_RESULT: Result = "Preempted"
STORAGE_ERROR_RESULT: Result = "CheckpointStorageError"
EXIT_CODES: dict[Result, int] = {
    CONFIG_ERROR_RESULT: EXIT_CONFIG_ERROR,
    WRITE_ERROR_RESULT: EXIT_WRITE_ERROR,
    NON_FINITE_RESULT: EXIT_NON_FINITE,
    HANG_RESULT: EXIT_HANG,
    PREEMPTED_RESULT: EXIT_PREEMPTED,
    STORAGE_ERROR_RESULT: EXIT_STORAGE_ERROR,
}
# Failures a gang restart cannot fix: the job fails at once. A write error was already retried once,
# inside the trainer (checkpoint.CheckpointManager.save).
FINAL: dict[Result, str] = {
    CONFIG_ERROR_RESULT: "invalid training config",
    WRITE_ERROR_RESULT: "cannot write its checkpoints or outputs",
    STORAGE_ERROR_RESULT: "its checkpoint storage refused it",
}
# What a write error means to the user: out of space (or quota), a read-only mount, a file size limit, a
# directory the container's user may not write (a volume owned by another user, or a path in the image).
WRITE_ERRNOS = {
    errno.ENOSPC: "disk full",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EFBIG: "file too large",
    errno.EACCES: "permission denied: not writable by the container's user; put it on a volume that user may "
    "write: an emptyDir, or a claim whose driver applies spec.securityContext.fsGroup. A hostPath directory keeps "
    "its owner and mode (fsGroup does not change them): make it writable by the trainer's uid "
    "(spec.securityContext.runAsUser)",
}


def result_of(exit_code: int | None, termination_message: str) -> Result | None:
    """What a trainer container's exit means: its exit code, or the termination message's result (a
    worker under torchrun, which exits 1 for any failed worker)."""
    by_code = next((result for result, code in EXIT_CODES.items() if code == exit_code), None)
    if by_code is not None:
        return by_code
    result = summary_of(termination_message).get("result")
    return result if result in EXIT_CODES else None


def summary_of(termination_message: str) -> dict:
    """The trainer's termination message as a mapping ({} when it is not one of the trainer's)."""
    try:
        summary = json.loads(termination_message)
    except (ValueError, RecursionError):  # the pod's own text: anything up to 4 KiB, e.g. 4000 brackets
        return {}
    return summary if isinstance(summary, dict) else {}


def waited_on_peers(termination_message: str) -> bool:
    """Whether the trainer stopped for a hang while waiting on its peers (watchdog.py): the likely victim
    of a stuck peer, not the cause."""
    summary = summary_of(termination_message)
    return summary.get("result") == HANG_RESULT and summary.get("waitingOnPeers") is True


# The summary's field that holds the end of the exception in the torchelastic error file
# (wire.ERROR_FILE_ENV), added by the pod launcher (launch.py).
ERROR_FIELD = "error"


def elastic_error_text(document: object) -> str | None:
    """The traceback a torchelastic error file holds (`message.extraInfo.py_callstack`), else its message;
    None when `document`, a parsed JSON document, is not such a file."""
    if not isinstance(document, dict):
        return None
    message = document.get("message")
    if isinstance(message, str) and "timestamp" in document:  # the format of a message without a traceback
        return message.strip() or None
    if not isinstance(message, dict) or not isinstance(message.get("extraInfo"), dict):
        return None
    callstack = message["extraInfo"].get("py_callstack")
    for text in (callstack, message.get("message")):
        if isinstance(text, str) and text.strip():
            return text.strip()
    return None


# torchrun's failure table (ChildFailedError) names its first failed worker under this, with its traceback.
ROOT_CAUSE_HEADER = "Root Cause (first observed failure):"


def torchrun_root_cause(text: str) -> str | None:
    """The first failed worker's entry of the failure table torchrun prints when a worker fails, as the end
    of a container's log holds it: from the table's Root Cause header on, without its rules of = and -, so
    that it ends with the worker's exception. None when `text` holds no such table."""
    start = text.rfind(ROOT_CAUSE_HEADER)
    if start < 0:
        return None
    lines = [line.rstrip() for line in text[start:].splitlines()]
    return "\n".join(line for line in lines if line.strip() and set(line.strip()) - {"=", "-"})


def write_error_cause(error: BaseException) -> str | None:
    """One line for a write error (ENOSPC, EDQUOT, EROFS, EFBIG, EACCES), found in `error` or what it wraps,
    else None."""
    for current in causes(error):
        if isinstance(current, OSError) and current.errno in WRITE_ERRNOS:
            where = f" writing {current.filename}" if current.filename else ""
            return f"{WRITE_ERRNOS[current.errno]} ({errno.errorcode[current.errno]}){where}"
    return None


def causes(error: BaseException) -> Iterator[BaseException]:
    """`error` and every exception it wraps: its cause and context, and each rank's failure that
    torch.distributed.checkpoint gathers into one exception. Each once."""
    seen: set[int] = set()
    pending: list[object] = [error]
    while pending:
        current = pending.pop()
        if not isinstance(current, BaseException) or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        wrapped = getattr(current, "failures", None)  # CheckpointException: {rank: (exception, traceback)}
        if isinstance(wrapped, dict):
            pending += [failure[0] if isinstance(failure, tuple) else failure for failure in wrapped.values()]
        pending += [current.__cause__, current.__context__]


class NonFinite(Exception):
    """The run diverged at `step`: a NaN or infinite loss or gradient norm (fp16: the loss scale fell
    below loop.MIN_LOSS_SCALE; onNonFinite skip: maxNonFiniteSteps dropped updates in a row, `step` the
    first). Raised at the first host read after it, before anything is saved; the trainer then exits
    EXIT_NON_FINITE. `last_checkpoint_step`, set once the saves in flight have ended: the newest
    checkpoint's step (0: there is none, as /progress's checkpointStep), the last with finite weights, as
    nothing later was saved."""

    def __init__(self, step: int):
        super().__init__(step)
        self.step = step
        self.last_checkpoint_step = 0

    def __str__(self) -> str:
        newest = f"step {self.last_checkpoint_step}" if self.last_checkpoint_step else "none"
        return (
            f"the loss or the gradients were not finite at step {self.step}: the run diverged "
            f"(the last finite checkpoint: {newest})"
        )


class CheckpointStorageError(Exception):
    """checkpoint.dir's storage refused the trainer's start-up check: `cause` names the URL and what was
    refused (a credential, the bucket, the endpoint's answer, the right to write). Never retried: the trainer
    exits EXIT_STORAGE_ERROR, and the operator fails the job with `cause`."""

    def __init__(self, cause: str):
        super().__init__(cause)
        self.cause = cause


class WriteError(Exception):
    """Writing a checkpoint or an output failed for a reason no retry in place fixes (write_error_cause);
    the trainer exits EXIT_WRITE_ERROR with `cause` as its one-line termination message."""

    def __init__(self, cause: str):
        super().__init__(cause)
        self.cause = cause
