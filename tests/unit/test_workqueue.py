"""The reconcile work queue (controller/workqueue.py): one reconcile per job at a time, triggers folded,
echoes of a settled job dropped, a job that acted looked at again, a failing one retried with backoff."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from scaletrain_operator.controller import workqueue
from scaletrain_operator.controller.workqueue import MAX_PASSES, FairReady, Outcome, WorkQueue, namespace_of

TIMEOUT = 5.0


class Reconciler:
    """Records each reconcile; `outcomes` says how each of them goes (SETTLED once they run out), and a
    reconcile of a key in `hold` waits until released."""

    def __init__(self, *outcomes: Outcome):
        self.outcomes = list(outcomes)
        self.calls: list[str] = []
        self.concurrent = self.most_concurrent = 0
        self.hold: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def __call__(self, key: str) -> Outcome:
        with self._lock:
            self.calls.append(key)
            self.concurrent += 1
            self.most_concurrent = max(self.most_concurrent, self.concurrent)
        if key in self.hold:
            assert self.hold[key].wait(TIMEOUT)
        with self._lock:
            self.concurrent -= 1
            outcome = self.outcomes.pop(0) if self.outcomes else Outcome.SETTLED
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


@pytest.fixture
def make_queue():
    queues = []

    def make(reconcile, **options):
        queue = WorkQueue(reconcile, **options)
        queue.start()
        queues.append(queue)
        return queue

    yield make
    for queue in queues:
        queue.stop()


def wait_until(condition, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "not within the timeout"
        time.sleep(0.005)


def settle():
    time.sleep(0.1)  # long enough for an idle queue to start anything it was going to


def test_triggers_while_a_reconcile_runs_fold_into_one_more_run_of_that_key_only(make_queue):
    reconciler = Reconciler()
    reconciler.hold["a"] = threading.Event()
    queue = make_queue(reconciler, workers=4)
    queue.add("a")
    wait_until(lambda: reconciler.calls == ["a"])
    for _ in range(5):
        queue.add("a")
    settle()
    assert reconciler.calls == ["a"] and reconciler.most_concurrent == 1
    reconciler.hold["a"].set()
    wait_until(lambda: reconciler.calls == ["a", "a"])
    settle()
    assert reconciler.calls == ["a", "a"]


def test_different_keys_run_in_parallel(make_queue):
    reconciler = Reconciler()
    reconciler.hold["a"] = threading.Event()
    queue = make_queue(reconciler, workers=2)
    queue.add("a")
    queue.add("b")
    wait_until(lambda: sorted(reconciler.calls) == ["a", "b"])
    reconciler.hold["a"].set()


def test_a_settled_key_ignores_triggers_without_news_but_not_news(make_queue):
    reconciler = Reconciler(Outcome.SETTLED)
    queue = make_queue(reconciler)
    queue.add("a")
    wait_until(lambda: reconciler.calls == ["a"])
    settle()
    queue.add("a", news=False)  # the echo of what the cache holds
    settle()
    assert reconciler.calls == ["a"]
    queue.add("a", news=True)
    wait_until(lambda: reconciler.calls == ["a", "a"])


def test_a_gone_key_is_forgotten(make_queue):
    reconciler = Reconciler(Outcome.SETTLED, Outcome.GONE)
    queue = make_queue(reconciler)
    queue.add("a")
    wait_until(lambda: reconciler.calls == ["a"])
    queue.add("a")
    wait_until(lambda: reconciler.calls == ["a", "a"])
    queue.add("a", news=False)  # no longer settled: a job of the same name may come back
    wait_until(lambda: reconciler.calls == ["a", "a", "a"])


def test_a_key_that_acted_is_looked_at_again_up_to_max_passes(make_queue):
    reconciler = Reconciler(*[Outcome.ACTED] * (MAX_PASSES + 2))
    queue = make_queue(reconciler, recheck_delay=0.0)
    queue.add("a")
    wait_until(lambda: len(reconciler.calls) == MAX_PASSES)
    settle()
    assert len(reconciler.calls) == MAX_PASSES
    queue.add("a", news=False)  # not settled: an echo still reconciles it
    wait_until(lambda: len(reconciler.calls) > MAX_PASSES)


def test_a_delayed_trigger_folds_a_burst_and_runs_after_its_delay(make_queue):
    reconciler = Reconciler()
    queue = make_queue(reconciler)
    started = time.monotonic()
    for _ in range(10):
        queue.add("a", delay=0.2)
    wait_until(lambda: reconciler.calls == ["a"])
    assert time.monotonic() - started >= 0.2
    settle()
    assert reconciler.calls == ["a"]


def test_a_trigger_without_delay_overtakes_a_delayed_one(make_queue):
    reconciler = Reconciler()
    queue = make_queue(reconciler)
    queue.add("a", delay=TIMEOUT * 2)
    queue.add("a")
    wait_until(lambda: reconciler.calls == ["a"])


def test_the_recheck_after_acting_waits_its_delay(make_queue):
    reconciler = Reconciler(Outcome.ACTED)
    queue = make_queue(reconciler, recheck_delay=0.3)
    queue.add("a")
    wait_until(lambda: reconciler.calls == ["a"])
    acted = time.monotonic()
    queue.add("a", news=False)  # the echo of its own write: only a recheck, so it waits too
    wait_until(lambda: reconciler.calls == ["a", "a"])
    assert time.monotonic() - acted >= 0.25


def test_a_failing_reconcile_is_retried_after_a_doubling_backoff_and_reported(make_queue, monkeypatch, caplog):
    monkeypatch.setattr(workqueue, "RETRY_BASE_SECONDS", 0.05)
    down = RuntimeError("the API server is down")
    reconciler = Reconciler(down, down, down, Outcome.SETTLED)
    times, reported = [], []
    reconciler_with_times = lambda key: times.append(time.monotonic()) or reconciler(key)  # noqa: E731
    queue = make_queue(reconciler_with_times, on_error=lambda key, failures, error: reported.append((failures, error)))
    queue.add("a")
    wait_until(lambda: len(reconciler.calls) == 4)  # no trigger needed: the queue retries by itself
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert gaps[0] >= 0.05 and gaps[1] >= 0.1 and gaps[2] >= 0.2, gaps
    assert reported == [(1, down), (2, down), (3, down)] and "the API server is down" in caplog.text
    settle()
    assert len(reconciler.calls) == 4  # settled: no more retries


def test_the_failure_count_starts_again_after_a_reconcile_that_went_through(make_queue, monkeypatch):
    monkeypatch.setattr(workqueue, "RETRY_BASE_SECONDS", 0.05)
    down = RuntimeError("down")
    reported = []
    reconciler = Reconciler(down, Outcome.WAITING, down)
    queue = make_queue(reconciler, on_error=lambda key, failures, error: reported.append(failures))
    queue.add("a")
    wait_until(lambda: len(reconciler.calls) == 2)
    queue.add("a")
    wait_until(lambda: len(reconciler.calls) == 4)
    assert reported == [1, 1]


def test_stop_ends_the_workers():
    queue = WorkQueue(Reconciler(), workers=2)
    queue.start()
    queue.stop()
    for worker in queue._workers:
        worker.join(TIMEOUT)
        assert not worker.is_alive()


def test_due_jobs_are_served_round_robin_across_namespaces_and_in_order_within_each():
    """A burst of 200 jobs in one namespace does not hold up a job of another that came due after it."""
    ready = FairReady(namespace_of)
    for n in range(200):
        ready.append(("busy", f"job-{n}"))
    ready.append(("quiet", "job"))
    ready.append(("busy", "job-200"))
    assert ("quiet", "job") in ready and ("quiet", "other") not in ready
    served = [ready.popleft() for _ in range(4)]
    assert served == [("busy", "job-0"), ("quiet", "job"), ("busy", "job-1"), ("busy", "job-2")]
    while ready:
        served.append(ready.popleft())
    assert served[-1] == ("busy", "job-200") and len(served) == 202
