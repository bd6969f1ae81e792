"""The reconcile work queue (controller/workqueue.py) under test: a reconciler that records its calls and
can be held, and, as a pytest plugin registered in tests/conftest.py, the `make_queue` fixture, which
starts queues and stops them after the test."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from scaletrain_operator.controller.workqueue import Outcome, WorkQueue

from .timeouts import WORK_QUEUE_REACTION_S


class Reconciler:
    """Records each reconcile; `outcomes` says how each of them goes (SETTLED once they run out), and a
    reconcile of a key in `hold` waits until released."""

    def __init__(self, *outcomes: Outcome | Exception):
        self.outcomes = list(outcomes)
        self.calls: list[str] = []
        self.concurrent = self.most_concurrent = 0
        self.hold: dict[str, threading.Event] = {}
        self._changed = threading.Condition()

    def __call__(self, key: str) -> Outcome:
        with self._changed:
            self.calls.append(key)
            self.concurrent += 1
            self.most_concurrent = max(self.most_concurrent, self.concurrent)
            self._changed.notify_all()
        if key in self.hold:
            assert self.hold[key].wait(WORK_QUEUE_REACTION_S)
        with self._changed:
            self.concurrent -= 1
            outcome = self.outcomes.pop(0) if self.outcomes else Outcome.SETTLED
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def wait_until(self, condition: Callable[[], bool], timeout_s: float = WORK_QUEUE_REACTION_S) -> None:
        """Until `condition` (of the calls so far) holds: looked at again at each call, not polled."""
        with self._changed:
            assert self._changed.wait_for(condition, timeout_s), "not within the timeout"


@pytest.fixture
def make_queue() -> Iterator[Callable[..., WorkQueue]]:
    queues = []

    def make(reconcile, **options):
        queue = WorkQueue(reconcile, **options)
        queue.start()
        queues.append(queue)
        return queue

    yield make
    for queue in queues:
        queue.stop()
