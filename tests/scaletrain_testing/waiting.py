"""The tests' one way to wait for what happens elsewhere (in the operator, the control plane, a process):
`wait_until` polls a condition, and fails naming what it waited for."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
POLL_INTERVAL_S = 0.1


class WaitTimeout(AssertionError):
    """What a test waited for did not happen in time."""


def wait_until(
    condition: Callable[[], T],
    timeout_s: float,
    what: str,
    interval_s: float = POLL_INTERVAL_S,
    details: Callable[[], str] | None = None,
) -> T:
    """The first truthy value of `condition()`, asked every `interval_s` seconds. After `timeout_s` seconds,
    WaitTimeout naming `what` ("the Job's pods to be bound") and the last value seen, then what `details()`
    tells (a log's tail, an object's state). An exception of `condition` ends the wait at once: that is how
    a condition fails fast on what can no longer come."""
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        if time.monotonic() > deadline:
            message = f"waited {timeout_s:g} s for {what}; the last value seen: {value!r}"
            raise WaitTimeout(message + (f"\n{details()}" if details is not None else ""))
        time.sleep(interval_s)
    return value
