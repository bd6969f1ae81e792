"""Reconcile requests per ScaleTrainJob, queued and folded as controller-runtime's workqueue does it.

kopf calls a handler for every watch event, in a thread of its own small pool. The handlers only add
the job to this queue and return, so that event intake never waits for API writes; a few worker
threads of the queue's own run the reconciles. One reconcile of a job runs at a time, and all that
arrives for it while it waits or runs folds into one more run.

A trigger may wait `delay` seconds first: the handlers give a child's event a short fold window, in
which a burst of them (the Job controller creating a gang's pods one after another, a gang going
away) becomes one reconcile and one status write instead of one per pod.

A reconcile says how it went (`Outcome`). After one that acted, the job is looked at again after
`recheck_delay` (what it wrote may call for more, as its echo would), up to MAX_PASSES in a row. After one that found
nothing to do, the job is settled: a trigger that brings no news (the watch echoing what the cache
already holds) is dropped, because a reconcile would decide the same nothing again.

A reconcile that raises (the API server failing or unreachable, a status patch refused with a 500) is
run again after a backoff that doubles with each failure in a row, from RETRY_BASE_SECONDS up to
RETRY_MAX_SECONDS, as controller-runtime's rate-limited requeue does; `on_error` hears of each failure.
Only the first failure in a row is logged with its traceback.

The jobs that are due are served fairly across namespaces (`group`): round robin between the namespaces
that have one waiting, and in the order they came due within each. So one tenant's burst (hundreds of
jobs created at once) delays another tenant's job by at most one reconcile per busy namespace, instead
of queueing it behind the whole burst.
"""

from __future__ import annotations

import enum
import heapq
import itertools
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable

log = logging.getLogger(__name__)

MAX_PASSES = 3  # reconciles in a row that each act; more means a decision that never settles
IDLE_WAKEUP_SECONDS = 1.0  # how often an idle worker checks whether the queue was stopped
RETRY_BASE_SECONDS, RETRY_MAX_SECONDS = 0.5, 60.0


def retry_delay(failures: int) -> float:
    """The backoff after `failures` failed reconciles in a row (1, 2, ...)."""
    return min(RETRY_BASE_SECONDS * 2 ** (failures - 1), RETRY_MAX_SECONDS)


class Outcome(enum.Enum):
    SETTLED = "nothing left to do"
    GONE = "the job is gone: forget it"
    ACTED = "acted: look again"
    WAITING = "wait for the next event"  # e.g. a newer version of the job is on its way
    FAILED = "failed: try again after a backoff"


def namespace_of(key: Hashable) -> Hashable:
    """A job's key is (namespace, name): its group is its namespace."""
    return key[0] if isinstance(key, tuple) else key


class FairReady:
    """The keys that are due, taken round robin across their groups and in order within each."""

    def __init__(self, group: Callable[[Hashable], Hashable]):
        self._group = group
        self._queues: OrderedDict[Hashable, deque[Hashable]] = OrderedDict()  # next group to serve first
        self._keys: set[Hashable] = set()

    def append(self, key: Hashable) -> None:
        self._queues.setdefault(self._group(key), deque()).append(key)
        self._keys.add(key)

    def popleft(self) -> Hashable:
        group, queue = next(iter(self._queues.items()))
        key = queue.popleft()
        if queue:
            self._queues.move_to_end(group)  # its turn is over: the other groups come first
        else:
            del self._queues[group]
        self._keys.discard(key)
        return key

    def __contains__(self, key: Hashable) -> bool:
        return key in self._keys

    def __bool__(self) -> bool:
        return bool(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


class WorkQueue:
    def __init__(
        self,
        reconcile: Callable[[Hashable], Outcome],
        workers: int = 4,
        recheck_delay: float = 0.0,
        on_error: Callable[[Hashable, int, Exception], None] | None = None,
        group: Callable[[Hashable], Hashable] = namespace_of,
    ):
        self._reconcile, self._recheck_delay, self._on_error = reconcile, recheck_delay, on_error
        self._workers = [
            threading.Thread(target=self._work, name=f"reconcile-{n}", daemon=True) for n in range(workers)
        ]
        self._changed = threading.Condition()
        self._stopped = False
        self._ready = FairReady(group)  # due: round robin across namespaces, in the order they came due in each
        self._due: dict[Hashable, float] = {}  # queued keys and when they may run
        self._timeline: list[tuple[float, int, Hashable]] = []  # a heap; entries whose time is no longer due are stale
        self._order = itertools.count()
        self._running: set[Hashable] = set()
        self._again: dict[Hashable, float] = {}  # triggered while running: when the next run may start
        self._passes: dict[Hashable, int] = {}
        self._settled: set[Hashable] = set()
        self._failures: dict[Hashable, int] = {}  # failed reconciles in a row

    def start(self) -> None:
        for worker in self._workers:
            worker.start()

    def stop(self) -> None:
        """The workers finish the reconciles they are running, then end."""
        with self._changed:
            self._stopped = True
            self._changed.notify_all()

    def add(self, key: Hashable, news: bool = True, delay: float = 0.0) -> None:
        """Reconcile `key` in `delay` seconds (sooner if already due sooner), or once more after the
        reconcile running for it. `news`: whether the trigger changed what the reconcile reads; one that
        did not is only a recheck, waits at least `recheck_delay`, and is dropped for a settled job."""
        with self._changed:
            if not news and key in self._settled:
                return
            self._settled.discard(key)
            due = time.monotonic() + (delay if news else max(delay, self._recheck_delay))
            if key in self._running:
                self._again[key] = min(due, self._again.get(key, due))
            elif key not in self._ready:
                self._schedule(key, due)

    def depth(self) -> int:
        """The keys due now and not yet taken by a worker: what the workers are behind by."""
        with self._changed:
            return len(self._ready)

    def forget(self, key: Hashable) -> None:
        """`key` is gone (its ScaleTrainJob was deleted)."""
        with self._changed:
            self._settled.discard(key)
            self._failures.pop(key, None)

    def _schedule(self, key: Hashable, due: float) -> None:
        if key in self._due and self._due[key] <= due:
            return
        self._due[key] = due
        heapq.heappush(self._timeline, (due, next(self._order), key))
        self._changed.notify()

    def _work(self) -> None:
        while (key := self._next()) is not None:
            outcome = self._reconcile_logged(key)
            self._done(key, outcome)

    def _next(self) -> Hashable | None:
        """The next key that is due (now marked running), or None once stopped."""
        with self._changed:
            while not self._stopped:
                now = time.monotonic()
                while self._timeline and self._timeline[0][0] <= now:
                    due, _, key = heapq.heappop(self._timeline)
                    if self._due.get(key) == due:
                        del self._due[key]
                        self._ready.append(key)
                if self._ready:
                    key = self._ready.popleft()
                    self._running.add(key)
                    return key
                wait = self._timeline[0][0] - now if self._timeline else IDLE_WAKEUP_SECONDS
                self._changed.wait(min(wait, IDLE_WAKEUP_SECONDS))
            return None

    def _done(self, key: Hashable, outcome: Outcome) -> None:
        with self._changed:
            self._running.discard(key)
            previous = self._passes.pop(key, 0)
            passes = previous + 1 if outcome is Outcome.ACTED else 0
            due = self._again.pop(key, None)
            if outcome is Outcome.FAILED:
                retry = time.monotonic() + retry_delay(self._failures[key])
                due = retry if due is None else min(due, retry)
            else:
                self._failures.pop(key, None)
            if outcome is Outcome.ACTED and passes < MAX_PASSES:
                recheck = time.monotonic() + self._recheck_delay
                due = recheck if due is None else min(due, recheck)
            if due is not None:
                if passes:
                    self._passes[key] = passes
                self._schedule(key, due)
            elif outcome is Outcome.SETTLED:
                self._settled.add(key)
            elif outcome is Outcome.GONE:
                self._settled.discard(key)

    def _reconcile_logged(self, key: Hashable) -> Outcome:
        """An error is logged, counted and told to `on_error`; the key is retried after a backoff."""
        try:
            return self._reconcile(key)
        except Exception as error:
            with self._changed:
                failures = self._failures[key] = self._failures.get(key, 0) + 1
            log.warning("reconciling %s failed (%d in a row): %s; retrying in %.1f s",
                        key, failures, error, retry_delay(failures), exc_info=failures == 1)  # fmt: skip
            if self._on_error is not None:
                try:
                    self._on_error(key, failures, error)
                except Exception:
                    log.exception("reporting the failure of %s failed", key)
            return Outcome.FAILED
